// torchrec's quantized-communication codec protocol (torchrec.distributed.types:
// QuantizedCommCodec, NoOpQuantizedCommCodec, QuantizedCommCodecs, CommOp).
//
// A codec turns the float32 tensor a comm op is about to send into the tensor that goes on the
// wire (encode), says how many wire elements n input elements become (calc_quantized_size), and
// turns what was received back into float32 (decode). The comm ops (alltoall_pooled,
// reduce_scatter_*, alltoall_sequence) follow one pattern, forward with `forward`, backward with
// `backward`:
//
//   std::optional<QuantizationContext> ctx = codec.create_context();
//   Tensor wire = codec.encode(x, ctx ? &*ctx : nullptr);  // dtype quantized_dtype()
//   ... collective on `wire`, splits from calc_quantized_size(...) ...  (reductions in that dtype)
//   Tensor y = codec.decode(received, ctx ? &*ctx : nullptr);  // float32
//
// The same context object goes to every call of one collective: encode records in it what the
// size computations and decode need (row-wise codecs), padded_size records the padded dims.
//
// Beyond the original: every codec carries a CodecTelemetry (codec_telemetry.h). When it is
// enabled, encode also decodes its own output and records the relative error of the round trip,
// so the cost of a precision can be read (and, under FERRY_DEBUG, is printed) per op and
// direction before it is trusted.
//
// Implementers override the *_impl methods and the queries; encode / decode are not virtual
// (they add the telemetry around encode_impl / decode_impl).
#pragma once

#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::torchrec {

class CodecTelemetry;

inline constexpr int64_t kRowDimDefault = 32;  // fbgemm quantize_comm.ROW_DIM_DEFAULT

// fbgemm_gpu.quantize_comm.QuantizationContext: the state one collective's encode, size
// computations and decode share. The MX4 fields of the original are absent (no MX4 codec).
struct QuantizationContext {
  // Values per quantised row of the row-wise formats (INT8, FP8 row-wise).
  int64_t row_dim = kRowDimDefault;
  // Bytes per encoded row, written by encode of a row-wise codec (-1 until then).
  int64_t row_dim_quant = -1;
  // Written by padded_size of a codec that pads (FP8 row-wise): each rank's dim sum rounded
  // up to a multiple of row_dim.
  std::optional<std::vector<int64_t>> padded_dim_sum_per_rank;
};

// padded_size's (padded_dim_sum, padding_size); `auto [padded, padding] = ...` works.
struct PaddedSize {
  int64_t padded_dim_sum = 0;
  int64_t padding_size = 0;
  bool operator==(const PaddedSize&) const = default;
};

class QuantizedCommCodec {
 public:
  QuantizedCommCodec();
  virtual ~QuantizedCommCodec();
  QuantizedCommCodec(const QuantizedCommCodec&) = delete;
  QuantizedCommCodec& operator=(const QuantizedCommCodec&) = delete;

  // The tensor to send for float32 `input` (dtype quantized_dtype()). May return `input`
  // itself (no-op and FP32 codecs): the caller must not write into the result. `ctx` may be
  // null (the codec then uses what create_context() would give). Throws InvalidArgument.
  Tensor encode(const Tensor& input, QuantizationContext* ctx = nullptr) const;
  // float32 values of a received tensor of quantized_dtype(). Same aliasing rule.
  Tensor decode(const Tensor& input, QuantizationContext* ctx = nullptr) const;

  // torch dtype of what encode returns.
  virtual DType quantized_dtype() const = 0;
  // Elements of quantized_dtype() that `input_len` float32 elements encode to. Throws
  // InvalidArgument when the codec cannot encode that many (not a multiple of the row dim).
  virtual int64_t calc_quantized_size(int64_t input_len,
                                      const QuantizationContext* ctx = nullptr) const = 0;
  // A fresh context for one collective, or none when the codec needs none.
  virtual std::optional<QuantizationContext> create_context() const = 0;
  // (padded dim sum, padding) of this rank's 2-D input [B, dim_per_rank[my_rank]] for codecs
  // that quantise in groups along dim 1; a 1-D input returns (shape[0], 0).
  virtual PaddedSize padded_size(const Tensor& input, const std::vector<int64_t>& dim_per_rank,
                                 int my_rank, QuantizationContext* ctx) const = 0;

  // Short description for messages and telemetry, e.g. "fp16", "int8 rowwise (row_dim 32)".
  virtual std::string name() const = 0;
  // name() and, when the codec belongs to a registry, its op and direction:
  // "int8 rowwise (row_dim 32) [POOLED_EMBEDDINGS_ALL_TO_ALL/forward]".
  std::string describe() const;

  // The round-trip error record of this codec (shared by every caller of the codec).
  CodecTelemetry& telemetry() const { return *telemetry_; }

 protected:
  virtual Tensor encode_impl(const Tensor& input, QuantizationContext* ctx) const = 0;
  virtual Tensor decode_impl(const Tensor& input, QuantizationContext* ctx) const = 0;

 private:
  std::unique_ptr<CodecTelemetry> telemetry_;
};

// torchrec NoOpQuantizedCommCodec: identity both ways, float32 on the wire, same size, no
// context; padded_size is (shape[0] of a 1-D input or shape[1], 0). Accepts any dtype.
class NoOpQuantizedCommCodec final : public QuantizedCommCodec {
 public:
  DType quantized_dtype() const override { return DType::Float32; }
  int64_t calc_quantized_size(int64_t input_len,
                              const QuantizationContext* ctx = nullptr) const override;
  std::optional<QuantizationContext> create_context() const override { return std::nullopt; }
  PaddedSize padded_size(const Tensor& input, const std::vector<int64_t>& dim_per_rank,
                         int my_rank, QuantizationContext* ctx) const override;
  std::string name() const override { return "no-op"; }

 protected:
  Tensor encode_impl(const Tensor& input, QuantizationContext*) const override { return input; }
  Tensor decode_impl(const Tensor& input, QuantizationContext*) const override { return input; }
};

// torchrec QuantizedCommCodecs: the codec of an op's forward collective and the one of its
// gradient collective. Both default to a no-op codec (a fresh one per object).
struct QuantizedCommCodecs {
  std::shared_ptr<QuantizedCommCodec> forward = std::make_shared<NoOpQuantizedCommCodec>();
  std::shared_ptr<QuantizedCommCodec> backward = std::make_shared<NoOpQuantizedCommCodec>();
};

// torchrec CommOp: the comm ops a codec registry is keyed by (the key is the enum's name).
enum class CommOp {
  POOLED_EMBEDDINGS_ALL_TO_ALL,
  POOLED_EMBEDDINGS_REDUCE_SCATTER,
  SEQUENCE_EMBEDDINGS_ALL_TO_ALL,
};

// CommOp.name, the registry key: "POOLED_EMBEDDINGS_ALL_TO_ALL".
const char* comm_op_name(CommOp op);
// CommOp.value: "pooled_embeddings_all_to_all".
const char* comm_op_value(CommOp op);
// Either spelling; throws InvalidArgument naming the valid ones.
CommOp comm_op_from_name(std::string_view name);

// The dim padded_size pads: shape[0] of a 1-D input, else shape[1]. Throws InvalidArgument
// (naming `codec`) for a 0-d input. For codec implementations.
int64_t padded_size_dim_sum(const Tensor& input, const QuantizedCommCodec& codec);

}  // namespace ferry::torchrec
