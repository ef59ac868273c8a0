// One collective's trip through a quantized comm codec, shared by every torchrec comm op (internal,
// not installed). The pattern of torchrec's comm ops: encode the values -> block sizes on the wire
// via calc_quantized_size -> the collective on the encoded dtype -> decode.
//
// Everything here is flat: the ops lay their data out as one 1-D buffer whose consecutive
// blocks go to (or come from) consecutive ranks, so one codec context and one encode cover a
// whole collective, and block sizes are element counts.
//
// The ops' values are float32 or float64; the codecs (fbgemm's) take float32. A no-op (or
// absent) codec passes the values through in their own dtype; any other codec encodes their
// float32 conversion and the decoded float32 values are converted back to the values' dtype.
#pragma once

#include <ferry/collectives/torchrec/comm/qcomm_codec.h>
#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ferry::torchrec::detail {

class CodecPass {
 public:
  // `who` gives the prefix of error messages ("alltoall_pooled on rank 1 of group 0 (size 2),
  // forward codec"). It is called only when there is an error to report: formatting it costs
  // more than a small op's whole launch. A null codec is a no-op.
  using Who = std::function<std::string()>;
  CodecPass(std::shared_ptr<QuantizedCommCodec> codec, DType value_dtype, Who who);

  bool passthrough() const { return codec_ == nullptr; }
  // The dtype the collective moves (and reduces in).
  DType wire_dtype() const;
  // Wire elements of `values` value elements (calc_quantized_size). InvalidArgument, naming
  // `who`, when the codec cannot encode that many (row-wise codecs: not a multiple of row_dim).
  int64_t wire_size(int64_t values) const;
  std::vector<int64_t> wire_sizes(const std::vector<int64_t>& values) const;
  // The sizes to send with: `encoded` (wire_sizes of `values`) with a codec, `values` without
  // one (then the two are equal, and `encoded` need not be built).
  const std::vector<int64_t>& wire_or_values(const std::vector<int64_t>& encoded,
                                             const std::vector<int64_t>& values) const {
    return passthrough() ? values : encoded;
  }

  // A flat (1-D) wire tensor of wire_size(values.numel()) elements; `values` is any shape.
  Tensor encode(const Tensor& values);
  // Flat values (1-D, the value dtype) of a received wire tensor.
  Tensor decode(const Tensor& wire);

  // Throws InvalidArgument, naming `who` and `op`, unless the wire dtype can be summed
  // (a reduce-scatter of row-wise or 8-bit codes would add codes, not values).
  void check_reducible(const char* op) const;

 private:
  QuantizationContext* ctx() { return ctx_ ? &*ctx_ : nullptr; }

  std::shared_ptr<QuantizedCommCodec> codec_;  // null: pass through
  std::optional<QuantizationContext> ctx_;
  DType value_dtype_;
  Who who_;
};

}  // namespace ferry::torchrec::detail
