#include "tools/bench/codec_bench.h"

#include <ferry/ferry.h>
#include "tools/bench/ops.h"
#include "tools/bench/report.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>

namespace ferry::bench {
namespace {

using torchrec::CommType;
using torchrec::FbgemmQuantizedCommCodec;
using torchrec::QuantizationContext;

struct CodecSpec {
  std::string name;
  CommType type;
  bool rowwise;  // FP8 row-wise needs a row_dim to be row-wise; INT8 always is
  double max_relative_error;  // the check before timing (normal(0, 1) input)
};

const std::vector<CodecSpec>& specs() {
  static const std::vector<CodecSpec> s{
      {"fp16", CommType::FP16, false, 1e-3},
      {"bf16", CommType::BF16, false, 5e-3},
      // HFP8 clamps at 0.9375: the input is scaled into range for it (see CodecCase).
      {"fp8", CommType::FP8, false, 0.05},
      {"fp8-rowwise", CommType::FP8, true, 0.05},
      {"int8", CommType::INT8, true, 0.02},
  };
  return s;
}

const CodecSpec& spec_of(const std::string& name) {
  for (const CodecSpec& s : specs())
    if (s.name == name) return s;
  FERRY_THROW(InvalidArgument, "codec bench: unknown codec ", name);
}

constexpr size_t kBytesPerSample = 256 * 1024;  // small sizes repeat inside a sample
constexpr int kMaxReps = 4096;

int reps_for(size_t bytes) {
  return static_cast<int>(
      std::clamp<size_t>(bytes == 0 ? kMaxReps : kBytesPerSample / bytes, 1, kMaxReps));
}

// One codec at one size: the input, the context, and a timed encode + decode.
class CodecCase {
 public:
  CodecCase(const CodecSpec& spec, int64_t count, int64_t row_dim)
      : codec_(spec.type, std::nullopt,
               spec.rowwise ? std::optional<int64_t>(row_dim) : std::nullopt),
        input_(normal({count}, 0.0, spec.type == CommType::FP8 && !spec.rowwise ? 0.25 : 1.0,
                      /*seed=*/42)),
        ctx_(*codec_.create_context()),
        reps_(reps_for(static_cast<size_t>(count) * sizeof(float))) {}

  // Relative error of one round trip, which also touches every buffer once.
  double check() {
    QuantizationContext ctx = ctx_;
    const Tensor back = codec_.decode(codec_.encode(input_, &ctx), &ctx);
    return torchrec::relative_error(input_, back);
  }

  double time_one_seconds() {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps_; ++i) {
      QuantizationContext ctx = ctx_;
      const Tensor wire = codec_.encode(input_, &ctx);
      sink_ = codec_.decode(wire, &ctx);
    }
    const auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double>(t1 - t0).count() / reps_;
  }

  std::string wire_description() const {
    return std::string(dtype_name(codec_.quantized_dtype())) + " on the wire";
  }

 private:
  FbgemmQuantizedCommCodec codec_;
  Tensor input_;
  QuantizationContext ctx_;
  int reps_;
  Tensor sink_;  // keeps the last decode alive so it is not optimised away
};

struct Timings {
  std::vector<double> codec, memcpy;
};

Timings time_alternating(CodecCase& c, MemcpyCase& m, int n) {
  Timings t;
  for (int i = 0; i < n; ++i) {
    t.codec.push_back(c.time_one_seconds());
    t.memcpy.push_back(m.time_one_seconds());
  }
  return t;
}

int iterations(const Options& o, const Timings& warm) {
  if (o.iters != 0) return o.iters;
  const double per_iter = summarize(warm.codec).median + summarize(warm.memcpy).median;
  if (!(per_iter > 0)) return kMaxIters;
  const double n = std::ceil(kTargetSecondsPerSize / per_iter);
  return static_cast<int>(std::clamp(n, double{kMinIters}, double{kMaxIters}));
}

double gbps(size_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0;
}

}  // namespace

const std::vector<std::string>& codec_bench_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const CodecSpec& s : specs()) v.push_back(s.name);
    return v;
  }();
  return names;
}

int run_codec_bench(const Options& o, const std::vector<size_t>& sizes, std::FILE* csv) {
  std::printf("# ferry-bench codec: encode + decode of a float32 tensor through the torchrec codec "
              "API on one core (allocations included)\n");
  std::printf("# GB/s = float32 input bytes / median time (1e9 B/s); memcpy: std::memcpy of the "
              "same bytes, iterations alternating; ratio = codec GB/s / memcpy GB/s\n");
  std::printf("# row-wise codecs: row_dim %lld (sizes rounded down to whole rows); rel_err: "
              "||decode(encode(x)) - x|| / ||x|| for x ~ normal(0, 1) (fp8: normal(0, 0.25))\n",
              static_cast<long long>(o.row_dim));
  if (csv)
    std::fprintf(csv, "codec,bytes,count,iters,time_us_median,time_us_min,time_us_max,gbps,"
                      "memcpy_us_median,memcpy_gbps,ratio,relative_error\n");
  for (const std::string& name : o.codecs) {
    const CodecSpec& spec = spec_of(name);
    std::optional<std::string> wire;
    int64_t previous = -1;
    for (size_t size : sizes) {
      int64_t count = static_cast<int64_t>(size / sizeof(float));
      if (spec.rowwise) count -= count % o.row_dim;
      if (count == previous) continue;
      previous = count;
      const size_t bytes = static_cast<size_t>(count) * sizeof(float);
      CodecCase c(spec, count, o.row_dim);
      if (!wire) {
        wire = c.wire_description();
        std::printf("#\n# %s (%s)\n# %13s %12s %6s %11s %11s %11s %9s %11s %12s %7s %9s\n",
                    name.c_str(), wire->c_str(), "size(B)", "count", "iters", "time(us)",
                    "min(us)", "max(us)", "GB/s", "memcpy(us)", "memcpy(GB/s)", "ratio",
                    "rel_err");
      }
      const double error = c.check();
      if (!(error <= spec.max_relative_error)) {
        std::fprintf(stderr, "ferry-bench: check failed: codec %s, %lld values: relative error "
                     "%g above %g\n", name.c_str(), static_cast<long long>(count), error,
                     spec.max_relative_error);
        return 1;
      }
      MemcpyCase copy(bytes);
      copy.time_one_seconds();
      const Timings warm = time_alternating(c, copy, std::max(o.warmup, 1));
      const int iters = iterations(o, warm);
      const Timings t = time_alternating(c, copy, iters);
      const Stats s = summarize(t.codec);
      const Stats m = summarize(t.memcpy);
      const double codec_gbps = gbps(bytes, s.median), copy_gbps = gbps(bytes, m.median);
      const double ratio = copy_gbps > 0 ? codec_gbps / copy_gbps : 0;
      std::printf("  %13zu %12lld %6d %11.3f %11.3f %11.3f %9.3f %11.3f %12.3f %7.3f %9.2e\n",
                  bytes, static_cast<long long>(count), iters, s.median * 1e6, s.min * 1e6,
                  s.max * 1e6, codec_gbps, m.median * 1e6, copy_gbps, ratio, error);
      std::fflush(stdout);
      if (csv) {
        std::fprintf(csv, "%s,%zu,%lld,%d,%.3f,%.3f,%.3f,%.4f,%.3f,%.4f,%.4f,%.3e\n",
                     name.c_str(), bytes, static_cast<long long>(count), iters, s.median * 1e6,
                     s.min * 1e6, s.max * 1e6, codec_gbps, m.median * 1e6, copy_gbps, ratio,
                     error);
        std::fflush(csv);
      }
    }
  }
  return 0;
}

}  // namespace ferry::bench
