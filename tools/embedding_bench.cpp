// ferry-embedding-bench: lookup throughput of the embedding modules' pooled lookup (the local
// kernel the sharded modules run) against a plain Eigen gather-and-sum loop over the same ids,
// in the same process (ratios only: this machine's timings swing between runs).
//
//   ferry-embedding-bench [--rows N] [--dim D] [--batch B] [--pooling P] [--features F]
//                         [--iters I] [--dtype float32|float64]
//
// Prints ids/s (one core) for: the lookup forward (no tape), the forward + backward with a fused
// SGD step, and the Eigen loop (forward only); and the ratio forward / Eigen (the goal: >= 0.8, the
// lookup at least 80% as fast as the plain loop).
//
//   ferry-embedding-bench --sharded [...]
//
// times the training step of a ShardedEmbeddingBagCollection per sharding type instead
// (tools/embedding_step_bench.cpp, whose head lists its options).
#include <ferry/autograd/grad_mode.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tools/cli/args.h"
#include "tools/embedding_step_bench.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

using namespace ferry;
using namespace ferry::torchrec;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <class T>
double eigen_loop(const Tensor& weight, const std::vector<int64_t>& ids,
                  const std::vector<int64_t>& offsets, int64_t features, int64_t batch,
                  int iters, double& checksum) {
  auto W = weight.matrix<T>();
  const int64_t D = weight.size(1);
  RowMatrix<T> out(batch, features * D);
  auto t0 = std::chrono::steady_clock::now();
  for (int it = 0; it < iters; ++it) {
    for (int64_t f = 0; f < features; ++f) {
      for (int64_t b = 0; b < batch; ++b) {
        auto acc = out.row(b).segment(f * D, D);
        acc.setZero();
        const int64_t k = f * batch + b;
        for (int64_t i = offsets[k]; i < offsets[k + 1]; ++i) acc.noalias() += W.row(ids[i]);
      }
    }
  }
  const double s = seconds_since(t0);
  checksum = static_cast<double>(out.sum());
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--sharded") == 0)
      return cli::guarded_main("ferry-embedding-bench", [&] {
        return ferry::embedding_bench::run_sharded_step_bench(argc, argv);
      });
  int64_t rows = 100000, dim = 64, batch = 512, pooling = 20, features = 4;
  int iters = 20;
  std::string dtype = "float32";
  const int status = cli::guarded_main("ferry-embedding-bench", [&] {
    cli::Parser("ferry-embedding-bench", "[options]",
                "Pooled embedding lookup throughput against a plain Eigen gather-and-sum loop.")
        .int_option("--rows", "rows per table (default 100000)", &rows, 1, int64_t{1} << 32)
        .int_option("--dim", "embedding dim (default 64)", &dim, 1, 1 << 16)
        .int_option("--batch", "bags per feature (default 512)", &batch, 1, 1 << 24)
        .int_option("--pooling", "ids per bag (default 20)", &pooling, 1, 1 << 16)
        .int_option("--features", "features (default 4)", &features, 1, 1 << 12)
        .int_option("--iters", "timed iterations (default 20)", &iters, 1, 1 << 24)
        .choice_option("--dtype", "table dtype (default float32)", &dtype,
                       {"float32", "float64"})
        .parse(argc, argv);
    return 0;
  });
  if (status != 0) return status;
  // The run itself under guarded_main too: a ferry error (a bad environment, say) is one line
  // and exit status 1, not an abort.
  return cli::guarded_main("ferry-embedding-bench", [&] {
    const DType dt = dtype_from_name(dtype);
    std::mt19937_64 gen(1);
    std::vector<int64_t> ids, lengths, offsets{0};
    std::vector<std::string> keys;
    for (int64_t f = 0; f < features; ++f) {
      std::string key = "f";
      key += std::to_string(f);
      keys.push_back(key);
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t n = 1 + static_cast<int64_t>(gen() % static_cast<uint64_t>(2 * pooling - 1));
        lengths.push_back(n);
        offsets.push_back(offsets.back() + n);
        for (int64_t i = 0; i < n; ++i)
          ids.push_back(static_cast<int64_t>(gen() % static_cast<uint64_t>(rows)));
      }
    }
    auto kjt = KeyedJaggedTensor::from_lengths_sync(keys, from_vector(ids), from_vector(lengths));
    auto table = std::make_shared<EmbeddingTable>("t", uniform({rows, dim}, -0.1, 0.1, 3, dt));
    std::vector<FeatureLookup> lookups;
    for (const auto& k : keys) lookups.push_back({.table = table, .feature = k});
    const double n_ids = static_cast<double>(ids.size()) * iters;

    double fwd = 0;
    Tensor ref;
    {
      NoGradGuard no_grad;
      pooled_embedding_lookup(lookups, kjt);  // warm up
      auto t0 = std::chrono::steady_clock::now();
      for (int it = 0; it < iters; ++it) ref = pooled_embedding_lookup(lookups, kjt).value();
      fwd = seconds_since(t0);
    }
    double checksum = 0;
    double eig = dt == DType::Float32
                     ? eigen_loop<float>(table->weight().value(), ids, offsets, features, batch,
                                         iters, checksum)
                     : eigen_loop<double>(table->weight().value(), ids, offsets, features, batch,
                                          iters, checksum);
    double ours = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) ours += ref.get_flat(i);
    if (std::abs(ours - checksum) > 1e-3 * (1 + std::abs(checksum))) {
      std::fprintf(stderr, "checksum mismatch: lookup %g, Eigen %g\n", ours, checksum);
      return 1;
    }
    table->set_fused_optimizer({.optimizer = EmbOptimType::Sgd, .learning_rate = 1e-3});
    Tensor up = ones({batch, features * dim}, dt);
    auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < iters; ++it) backward(pooled_embedding_lookup(lookups, kjt), up);
    const double fb = seconds_since(t0);

    std::printf("rows %lld dim %lld batch %lld features %lld mean pooling %.1f dtype %s iters %d\n",
                static_cast<long long>(rows), static_cast<long long>(dim),
                static_cast<long long>(batch), static_cast<long long>(features),
                static_cast<double>(ids.size()) / static_cast<double>(batch * features),
                dtype.c_str(), iters);
    std::printf("%-34s %12.3e ids/s\n", "lookup forward (no tape)", n_ids / fwd);
    std::printf("%-34s %12.3e ids/s\n", "Eigen gather-and-sum loop", n_ids / eig);
    std::printf("%-34s %12.3e ids/s\n", "lookup forward + backward (fused SGD)", n_ids / fb);
    std::printf("ratio lookup / Eigen: %.2f\n", eig / fwd);
    return 0;
  });
}
