#include "tools/dlrm/compute_limit.h"

#include <ferry/ferry.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

namespace ferry::dlrm_tool {

namespace {

using Clock = std::chrono::steady_clock;

// Median seconds of `reps` calls of f after `warm` unmeasured ones: the host drifts, a median
// of short repeats is what a step would see.
template <class F>
double median_seconds(int warm, int reps, F&& f) {
  for (int i = 0; i < warm; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Layer {
  int64_t in, out;
  Activation act;
  bool input_needs_grad;
};

}  // namespace

ComputeLimit measure_compute_limit(const StepShape& s) {
  std::vector<Layer> layers;
  int64_t width = s.dense_in;
  for (size_t l = 0; l < s.bottom.size(); ++l) {
    layers.push_back({width, s.bottom[l], Activation::Relu, l > 0});
    width = s.bottom[l];
  }
  const int64_t n = s.num_sparse + 1, pairs = n * (n - 1) / 2;
  width = s.dim + pairs;
  for (size_t l = 0; l < s.top.size(); ++l) {
    const bool last = l + 1 == s.top.size();
    layers.push_back({width, s.top[l], last ? Activation::None : Activation::Relu, true});
    width = s.top[l];
  }
  ComputeLimit r;
  const int64_t B = s.batch;
  for (const Layer& layer : layers) {
    const Tensor x = uniform({B, layer.in}, -1, 1, 1);
    const Tensor w = uniform({layer.out, layer.in}, -0.1, 0.1, 2);
    const Tensor b = uniform({layer.out}, -0.1, 0.1, 3);
    const Tensor y = kernels::linear(x, w, b, layer.act);
    const Tensor g = uniform({B, layer.out}, -1, 1, 4);
    const double fwd = median_seconds(3, 15, [&] { (void)kernels::linear(x, w, b, layer.act); });
    const double bwd = median_seconds(3, 15, [&] {
      (void)kernels::linear_backward(g, x, w, y, layer.act, layer.input_needs_grad, true, true);
    });
    const double flops = 2.0 * static_cast<double>(B * layer.in * layer.out) *
                         (layer.input_needs_grad ? 3 : 2);
    r.gemm_flops += flops;
    r.gemm_ms += 1e3 * (fwd + bwd);
    const double fwd_rate = 2.0 * static_cast<double>(B * layer.in * layer.out) / fwd / 1e9;
    r.best_gflops = std::max(r.best_gflops, fwd_rate);
  }
  r.gemm_gflops = r.gemm_ms > 0 ? r.gemm_flops / (r.gemm_ms * 1e-3) / 1e9 : 0;
  r.interaction_flops = 6.0 * static_cast<double>(B * pairs * s.dim);
  r.interaction_ms = r.best_gflops > 0 ? r.interaction_flops / (r.best_gflops * 1e9) * 1e3 : 0;
  // Copy rate over this rank's tables (at least 1 MiB): read + write of every byte.
  const auto bytes = static_cast<size_t>(std::max(s.table_bytes_per_rank, 1048576.0));
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  const double copy = median_seconds(2, 7, [&] { std::memcpy(dst.data(), src.data(), bytes); });
  r.copy_gbps = 2.0 * static_cast<double>(bytes) / copy / 1e9;
  r.embedding_bytes = 3.0 * s.ids_per_rank * static_cast<double>(s.dim) * 4.0;
  r.embedding_ms = r.embedding_bytes / (r.copy_gbps * 1e9) * 1e3;
  return r;
}

ComputeLimit faster_of(const ComputeLimit& a, const ComputeLimit& b) {
  ComputeLimit r = a;
  if (b.gemm_ms < a.gemm_ms) {
    r.gemm_ms = b.gemm_ms;
    r.gemm_gflops = b.gemm_gflops;
  }
  r.best_gflops = std::max(a.best_gflops, b.best_gflops);
  r.interaction_ms = std::min(a.interaction_ms, b.interaction_ms);
  if (b.embedding_ms < a.embedding_ms) {
    r.embedding_ms = b.embedding_ms;
    r.copy_gbps = b.copy_gbps;
  }
  return r;
}

}  // namespace ferry::dlrm_tool
