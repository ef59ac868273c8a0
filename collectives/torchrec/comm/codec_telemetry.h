// Per-codec record of what quantisation costs (ferry addition; torchrec has nothing like it).
//
// Every QuantizedCommCodec owns one. While it is enabled, each encode also decodes its own
// output and records the relative error of that round trip:
//
//   relative_error = ||decode(encode(x)) - x||_2 / ||x||_2
//
// over the finite elements of x (NaN and +-inf inputs are left out: their treatment is a rule
// of the codec, documented in codec_kernels.h, not a quantisation error). It is 0 for an exact
// codec, inf when a finite input comes back non-finite, and inf when x is all zeros but the
// round trip is not. The loss scale is part of the round trip, so the error is in the units of x.
//
// Enabled by set_enabled(true), or for every codec while FERRY_DEBUG=info|trace selects the
// "codec" subsystem (FERRY_DEBUG_SUBSYS empty or listing codec); then each record is also printed:
//   [ferry <pid> INFO codec] POOLED_EMBEDDINGS_ALL_TO_ALL/forward fp16: numel 4096 relative
//   error 2.1e-04 (max 2.3e-04 over 7 calls)
// The measurement costs a decode and a pass over x per encode; disabled, it costs one flag read.
// Thread safe: ranks of the local transport may share a registry.
#pragma once

#include <ferry/runtime/tensor.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

namespace ferry::torchrec {

struct CodecErrorStats {
  int64_t calls = 0;                // encodes measured since the last reset
  int64_t last_numel = 0;           // elements of the last measured input
  double last_relative_error = 0;   // of the last measured encode
  double max_relative_error = 0;    // running maximum since the last reset
};

class CodecTelemetry {
 public:
  CodecTelemetry() = default;
  CodecTelemetry(const CodecTelemetry&) = delete;
  CodecTelemetry& operator=(const CodecTelemetry&) = delete;

  // Measure every encode from now on (true) or only under FERRY_DEBUG (false, the default).
  void set_enabled(bool enabled) { forced_.store(enabled, std::memory_order_relaxed); }
  bool enabled() const;

  // Which op and direction the codec serves ("POOLED_EMBEDDINGS_ALL_TO_ALL/forward"); set by
  // get_qcomm_codecs / get_qcomm_codecs_registry, empty for a codec made by hand.
  void set_label(std::string label);
  std::string label() const;

  CodecErrorStats stats() const;
  void reset();

  // Adds one measurement (and prints it under FERRY_DEBUG). `codec` names the codec.
  void record(double relative_error, int64_t numel, const std::string& codec);

 private:
  std::atomic<bool> forced_{false};
  mutable std::mutex mu_;
  std::string label_;
  CodecErrorStats stats_;
};

// The relative error defined above between `reference` (what was encoded) and `approx` (what
// came back), compared element by element in row-major order; any floating dtypes, same numel.
double relative_error(const Tensor& reference, const Tensor& approx);

}  // namespace ferry::torchrec
