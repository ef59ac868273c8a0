// The shapes (per rank, n = size / 4 float32 elements of input, D = min(64, n) columns):
//   alltoall_pooled, variable_batch_alltoall_pooled, alltoall_sequence
//       B_g = W * max(1, n / (D W)) rows of D columns (a sequence rank has one local feature
//       whose W*B ids each have length 1); raw: all_to_all_single of B*D per destination, then
//       the same again for the gradient.
//   reduce_scatter_pooled (W inputs [M, D]), reduce_scatter_base_pooled ([W M, D]),
//   reduce_scatter_v_pooled ([sum s, D], s = M+1 on rank 0's block, M-1 on the last one's)
//       M = max(1, n / (D W)); raw: reduce_scatter(_v), then all_gather(_v) for the gradient.
//   all_gather_base_pooled ([M, D], M = max(1, n / D)); raw: all_gather, then reduce_scatter.
// With a codec the raw tensors have the codec's wire dtype and calc_quantized_size elements per
// block, so the ratio is what the op adds: encode, decode, division, the tape's two nodes.
#include "tools/bench/torchrec_ops_bench.h"

#include <ferry/collectives/torchrec/torchrec.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>

namespace ferry::bench {

namespace tr = ferry::torchrec;

const std::vector<std::string>& torchrec_op_names() {
  static const std::vector<std::string> names = {
      "alltoall_pooled",     "variable_batch_alltoall_pooled", "alltoall_sequence",
      "reduce_scatter_pooled", "reduce_scatter_base_pooled",   "reduce_scatter_v_pooled",
      "all_gather_base_pooled"};
  return names;
}

bool is_torchrec_op(const std::string& name) {
  const auto& n = torchrec_op_names();
  return std::find(n.begin(), n.end(), name) != n.end();
}

const std::vector<std::string>& torchrec_op_codec_names() {
  static const std::vector<std::string> names = {"none", "fp16", "bf16", "fp8", "int8"};
  return names;
}

namespace {

using Clock = std::chrono::steady_clock;

std::optional<tr::QuantizedCommCodecs> codecs_for(const std::string& name) {
  if (name.empty() || name == "none") return std::nullopt;
  const tr::CommType t = name == "fp16"   ? tr::CommType::FP16
                         : name == "bf16" ? tr::CommType::BF16
                         : name == "fp8"  ? tr::CommType::FP8
                                          : tr::CommType::INT8;
  return tr::get_qcomm_codecs(tr::QCommsConfig(t, t));
}

bool is_reduction(const std::string& op) {
  return op.rfind("reduce_scatter", 0) == 0 || op == "all_gather_base_pooled";
}

// One op at one size: the torchrec call, and the raw collectives it is measured against.
struct Case {
  Tensor input;                                      // this rank's float32 input
  std::function<Variable(const Variable&)> op;       // launch + wait
  std::function<void()> raw_forward, raw_backward;   // on buffers allocated once
  Tensor raw_output;                                 // raw_forward's result (no codec: compared)
};

double elapsed(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Wire tensors for `blocks` blocks of `elements` float32 values each, under `codecs`' forward
// codec (or float32 without one).
Tensor wire(const std::optional<tr::QuantizedCommCodecs>& codecs, int64_t blocks,
            int64_t elements) {
  if (!codecs) return zeros({blocks * elements}, DType::Float32);
  const tr::QuantizedCommCodec& c = *codecs->forward;
  return zeros({blocks * c.calc_quantized_size(elements)}, c.quantized_dtype());
}

Case make_case(const std::string& op, int64_t n, const Group& g,
               const std::optional<tr::QuantizedCommCodecs>& codecs) {
  const int W = g.size();
  const int64_t D = std::max<int64_t>(1, std::min<int64_t>(64, n));
  const int64_t per_rank_rows = std::max<int64_t>(1, n / (D * W));
  Case c;
  if (op == "alltoall_pooled" || op == "variable_batch_alltoall_pooled" ||
      op == "alltoall_sequence") {
    const int64_t B = per_rank_rows;
    c.input = normal({B * W, D}, 0, 1, 17 + g.rank());
    if (op == "alltoall_pooled") {
      const tr::All2AllPooledInfo info(std::vector<int64_t>(W, B), std::vector<int64_t>(W, D));
      c.op = [info, g, codecs](const Variable& x) { return tr::alltoall_pooled(x, info, g, codecs).wait(); };
    } else if (op == "variable_batch_alltoall_pooled") {
      const tr::VariableBatchAll2AllPooledInfo info(
          std::vector<std::vector<int64_t>>(W, {B}), std::vector<int64_t>(W, B),
          std::vector<std::vector<int64_t>>(W, {D}));
      c.op = [info, g, codecs](const Variable& x) {
        return tr::variable_batch_alltoall_pooled(x, info, g, codecs).wait();
      };
    } else {
      tr::All2AllSequenceInfo info;
      info.embedding_dim = D;
      info.lengths_after_sparse_data_all2all = full({1, W * B}, 1, DType::Int64);
      info.forward_recat_tensor = tr::sequence_forward_recat(1, W);
      info.backward_recat_tensor = tr::sequence_backward_recat(1, W);
      info.input_splits.assign(W, B);
      info.output_splits.assign(W, B);
      c.op = [info, g, codecs](const Variable& x) { return tr::alltoall_sequence(x, info, g, codecs).wait(); };
    }
    Tensor in = codecs ? wire(codecs, W, B * D) : c.input.reshape({B * W * D});
    Tensor out = wire(codecs, W, B * D), back = wire(codecs, W, B * D);
    c.raw_output = out;
    // With split sizes, as the ops call it (the equal-split form takes another path).
    const std::vector<int64_t> splits(W, out.numel() / W);
    c.raw_forward = [in, out, splits, g] { all_to_all_single(in, out, splits, splits, g).wait(); };
    c.raw_backward = [out, back, splits, g] {
      all_to_all_single(out, back, splits, splits, g).wait();
    };
    return c;
  }
  const int64_t M = op == "all_gather_base_pooled" ? std::max<int64_t>(1, n / D) : per_rank_rows;
  if (op == "all_gather_base_pooled") {
    c.input = normal({M, D}, 0, 1, 17 + g.rank());
    c.op = [g, codecs](const Variable& x) { return tr::all_gather_base_pooled(x, g, codecs).wait(); };
    Tensor in = codecs ? wire(codecs, 1, M * D) : c.input.reshape({M * D});
    Tensor out = wire(codecs, W, M * D), back = wire(codecs, 1, M * D);
    c.raw_output = out;
    c.raw_forward = [in, out, g] { all_gather(in, out, g).wait(); };
    c.raw_backward = [out, back, g] { reduce_scatter(out, back, g).wait(); };
    return c;
  }
  if (op == "reduce_scatter_v_pooled") {
    std::vector<int64_t> splits(W, M);
    if (W > 1 && M > 1) ++splits[0], --splits[W - 1];
    int64_t rows = 0;
    for (int64_t s : splits) rows += s;
    c.input = normal({rows, D}, 0, 1, 17 + g.rank());
    c.op = [splits, g, codecs](const Variable& x) {
      return tr::reduce_scatter_v_pooled(x, splits, g, codecs).wait();
    };
    std::vector<int64_t> sizes;
    int64_t total = 0;
    for (int64_t s : splits) {
      sizes.push_back(codecs ? codecs->forward->calc_quantized_size(s * D) : s * D);
      total += sizes.back();
    }
    const DType dt = codecs ? codecs->forward->quantized_dtype() : DType::Float32;
    Tensor in = codecs ? zeros({total}, dt) : c.input.reshape({rows * D});
    Tensor out = zeros({sizes[g.rank()]}, dt), back = zeros({total}, dt);
    c.raw_output = out;
    c.raw_forward = [in, out, sizes, g] { reduce_scatter_v(in, out, sizes, g).wait(); };
    c.raw_backward = [out, back, sizes, g] { all_gather_v(out, back, sizes, g).wait(); };
    return c;
  }
  // reduce_scatter_pooled (W inputs of [M, D], taken as row blocks of one tensor) and
  // reduce_scatter_base_pooled ([W M, D]).
  c.input = normal({W * M, D}, 0, 1, 17 + g.rank());
  if (op == "reduce_scatter_pooled") {
    // Each block is a leaf of its own, as a trainer's W embedding outputs are: a narrow() of
    // one Variable would add narrow's backward (a zero-padded copy of x per block, then their
    // sum) to what is measured.
    c.op = [W, M, g, codecs](const Variable& x) {
      std::vector<Variable> parts;
      for (int j = 0; j < W; ++j)
        parts.push_back(Variable(x.value().narrow(0, j * M, M), x.requires_grad()));
      return tr::reduce_scatter_pooled(parts, g, codecs).wait();
    };
  } else {
    c.op = [g, codecs](const Variable& x) { return tr::reduce_scatter_base_pooled(x, g, codecs).wait(); };
  }
  Tensor in = codecs ? wire(codecs, W, M * D) : c.input.reshape({W * M * D});
  Tensor out = wire(codecs, 1, M * D), back = wire(codecs, W, M * D);
  c.raw_output = out;
  c.raw_forward = [in, out, g] { reduce_scatter(in, out, g).wait(); };
  c.raw_backward = [out, back, g] { all_gather(out, back, g).wait(); };
  return c;
}

// Empty when the op's forward is right: equal to the raw collective's output without a codec,
// within the codec's error of the unquantized op's output with one.
std::string check(const std::string& op, const Case& c, const Case& plain, bool quantized,
                  const std::string& codec) {
  const Tensor y = c.op(Variable(c.input, false)).value();
  if (!quantized) {
    c.raw_forward();
    Tensor raw = c.raw_output;
    if (op == "alltoall_pooled") {
      // The raw exchange leaves source-major blocks [W][B][D]; the pooled output puts the
      // sources' columns side by side, [B][W D].
      const int64_t W = y.shape()[1] / c.input.shape()[1], B = y.shape()[0],
                    D = c.input.shape()[1];
      Tensor side = empty({B * W * D}, DType::Float32);
      for (int64_t i = 0; i < W; ++i)
        for (int64_t b = 0; b < B; ++b)
          for (int64_t d = 0; d < D; ++d)
            side.set_flat(b * W * D + i * D + d, raw.get_flat((i * B + b) * D + d));
      raw = side;
    }
    if (!equal(y.reshape({y.numel()}), raw.reshape({raw.numel()})))
      return op + ": the output differs from the raw collective's";
    return "";
  }
  const Tensor ref = plain.op(Variable(plain.input, false)).value();
  double err = 0, norm = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    err += std::pow(y.get_flat(i) - ref.get_flat(i), 2);
    norm += std::pow(ref.get_flat(i), 2);
  }
  const double rel = std::sqrt(err / std::max(norm, 1e-30));
  const double bound = codec == "fp16" ? 1e-3 : codec == "bf16" ? 1e-2 : 0.2;
  if (!(rel <= bound))
    return op + " with " + codec + ": relative error " + std::to_string(rel) + " above " +
           std::to_string(bound);
  return "";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Timings {
  double fwd = 0, raw_fwd = 0, both = 0, raw_both = 0, copy = 0;
  int iters = 0;
};

Timings time_case(const Options& o, const Case& c, Group& g, RankSync& sync) {
  const Tensor grad = full(c.op(Variable(c.input, false)).value().shape(), 0.5);
  Tensor copy_dst = empty(c.input.shape(), c.input.dtype());
  // The five steps, alternated within each iteration so drift affects all alike.
  const std::vector<std::function<void()>> steps = {
      [&] { c.op(Variable(c.input, false)); },
      [&] { c.raw_forward(); },
      [&] {
        Variable x(c.input, true);
        c.op(x).backward(grad);
      },
      [&] {
        c.raw_forward();
        c.raw_backward();
      },
      [&] { std::memcpy(copy_dst.raw_data(), c.input.raw_data(), c.input.nbytes()); },
  };
  auto one = [&](std::vector<double>& seconds) {
    for (size_t s = 0; s < steps.size(); ++s) {
      barrier(g).wait();
      const auto t0 = Clock::now();
      steps[s]();
      seconds[s] = elapsed(t0);
    }
  };
  std::vector<double> seconds(steps.size());
  for (int i = 0; i < std::max(o.warmup, 1); ++i) one(seconds);
  int iters = o.iters;
  if (iters == 0) {
    double per_iter = 0;
    for (double s : seconds) per_iter += s;
    per_iter = sync.max_over_ranks({per_iter})[0];
    iters = static_cast<int>(std::clamp(std::ceil(kTargetSecondsPerSize / std::max(per_iter, 1e-9)),
                                        double{kMinIters}, 200.0));
  }
  std::vector<std::vector<double>> samples(steps.size());
  if (o.torchrec_grouped) {
    // Each step's iterations together, after warm-up runs of that step.
    for (size_t s = 0; s < steps.size(); ++s) {
      for (int i = 0; i < std::max(o.warmup, 1); ++i) steps[s]();
      for (int i = 0; i < iters; ++i) {
        barrier(g).wait();
        const auto t0 = Clock::now();
        steps[s]();
        samples[s].push_back(sync.max_over_ranks({elapsed(t0)})[0]);
      }
    }
  } else {
    for (int i = 0; i < iters; ++i) {
      one(seconds);
      const std::vector<double> slowest = sync.max_over_ranks(seconds);
      for (size_t s = 0; s < steps.size(); ++s) samples[s].push_back(slowest[s]);
    }
  }
  return {median(samples[0]), median(samples[1]), median(samples[2]), median(samples[3]),
          median(samples[4]), iters};
}

}  // namespace

bool run_torchrec_ops_bench(const Options& o, const std::vector<size_t>& sizes, Group& world,
                            RankSync& sync, bool print) {
  const std::optional<tr::QuantizedCommCodecs> codecs = codecs_for(o.torchrec_codec);
  const bool quantized = codecs.has_value();
  if (print) {
    std::printf("# torchrec comm ops on %d ranks, codec %s; size = this rank's float32 input; "
                "medians of the slowest rank in us; ratio = torchrec / raw collectives moving "
                "the same bytes; memcpy = one copy of the input\n",
                world.size(), quantized ? o.torchrec_codec.c_str() : "none");
    std::printf("%-31s %10s %10s %10s %6s %10s %10s %6s %9s %6s\n", "op", "size", "fwd",
                "raw_fwd", "ratio", "fwd+bwd", "raw_f+b", "ratio", "memcpy", "iters");
  }
  for (const std::string& op : o.torchrec_ops) {
    if (quantized && is_reduction(op) && (o.torchrec_codec == "fp8" || o.torchrec_codec == "int8")) {
      if (print)
        std::printf("%-31s skipped: a %s wire cannot be summed (the op refuses it)\n", op.c_str(),
                    o.torchrec_codec.c_str());
      continue;
    }
    int64_t previous = -1;
    for (size_t bytes : sizes) {
      const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(bytes / 4));
      if (n == previous) continue;
      previous = n;
      std::string error;
      std::optional<Case> c, plain;
      try {
        c.emplace(make_case(op, n, world, codecs));
        if (quantized) plain.emplace(make_case(op, n, world, std::nullopt));
        error = check(op, *c, quantized ? *plain : *c, quantized, o.torchrec_codec);
      } catch (const std::exception& e) {
        error = op + ": " + e.what();
      }
      if (!error.empty()) std::fprintf(stderr, "ferry-bench: check failed: %s\n", error.c_str());
      if (!sync.all_of(error.empty())) return false;
      const Timings t = time_case(o, *c, world, sync);
      if (print) {
        // Two decimals: at 512 B an op takes about a microsecond, and its distance to the raw
        // op is a fraction of one.
        std::printf("%-31s %10s %10.2f %10.2f %6.2f %10.2f %10.2f %6.2f %9.2f %6d\n", op.c_str(),
                    bytes_str(c->input.nbytes()).c_str(), t.fwd * 1e6, t.raw_fwd * 1e6,
                    t.fwd / t.raw_fwd, t.both * 1e6, t.raw_both * 1e6, t.both / t.raw_both,
                    t.copy * 1e6, t.iters);
        std::fflush(stdout);
      }
    }
  }
  return true;
}

}  // namespace ferry::bench
