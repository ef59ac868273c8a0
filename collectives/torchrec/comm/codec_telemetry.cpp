#include <ferry/collectives/torchrec/comm/codec_telemetry.h>

#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace ferry::torchrec {
namespace {

constexpr const char* kSubsys = "codec";

// Elements as double, converting (copying) only when the dtype is not float32 or float64.
template <class F>
void with_doubles(const Tensor& t, F&& f) {
  if (t.dtype() == DType::Float64) {
    f(t.data<double>());
  } else if (t.dtype() == DType::Float32) {
    f(t.data<float>());
  } else {
    const Tensor wide = t.to(DType::Float64);
    f(wide.data<double>());
  }
}

std::string format_error(double e) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", e);
  return buf;
}

}  // namespace

bool CodecTelemetry::enabled() const {
  return forced_.load(std::memory_order_relaxed) || log_enabled(LogLevel::Info, kSubsys);
}

void CodecTelemetry::set_label(std::string label) {
  std::lock_guard<std::mutex> lock(mu_);
  label_ = std::move(label);
}

std::string CodecTelemetry::label() const {
  std::lock_guard<std::mutex> lock(mu_);
  return label_;
}

CodecErrorStats CodecTelemetry::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CodecTelemetry::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = CodecErrorStats{};
}

void CodecTelemetry::record(double relative_error, int64_t numel, const std::string& codec) {
  CodecErrorStats now;
  std::string label;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.calls;
    stats_.last_numel = numel;
    stats_.last_relative_error = relative_error;
    // A NaN error cannot occur (see relative_error), so max is a plain running maximum.
    stats_.max_relative_error = std::max(stats_.max_relative_error, relative_error);
    now = stats_;
    label = label_;
  }
  FERRY_LOG(Info, kSubsys, label.empty() ? "" : label + " ", codec, ": numel ", numel,
            " relative error ", format_error(now.last_relative_error), " (max ",
            format_error(now.max_relative_error), " over ", now.calls, " calls)");
}

double relative_error(const Tensor& reference, const Tensor& approx) {
  FERRY_CHECK(reference.numel() == approx.numel(), InvalidArgument,
              "relative_error: the tensors hold ", reference.numel(), " and ", approx.numel(),
              " elements");
  FERRY_CHECK(is_floating(reference.dtype()) && is_floating(approx.dtype()), InvalidArgument,
              "relative_error: floating tensors expected, given ", dtype_name(reference.dtype()),
              " and ", dtype_name(approx.dtype()));
  const int64_t n = reference.numel();
  double diff2 = 0, ref2 = 0;
  bool lost = false;  // a finite input came back non-finite
  with_doubles(reference, [&](const auto* r) {
    with_doubles(approx, [&](const auto* a) {
      for (int64_t i = 0; i < n; ++i) {
        const double x = static_cast<double>(r[i]);
        if (!std::isfinite(x)) continue;
        const double y = static_cast<double>(a[i]);
        if (!std::isfinite(y)) lost = true;
        diff2 += (y - x) * (y - x);
        ref2 += x * x;
      }
    });
  });
  const double inf = std::numeric_limits<double>::infinity();
  if (lost) return inf;
  if (ref2 == 0) return diff2 == 0 ? 0.0 : inf;
  return std::sqrt(diff2) / std::sqrt(ref2);
}

}  // namespace ferry::torchrec
