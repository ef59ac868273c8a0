// The FBGEMM codecs and torchrec's configuration of them: fbgemm_gpu.quantize_comm.
// QuantizedCommCodec (here FbgemmQuantizedCommCodec, the name torchrec imports it under) and
// torchrec.distributed.fbgemm_qcomm_codec: CommType, QCommsConfig, get_qcomm_codecs,
// get_qcomm_codecs_registry.
//
// Wire formats (numerics and layouts in codec_kernels.h):
//   FP32  identity (encode returns its input).
//   FP16  clamp(loss_scale * x, +-65504) rounded to binary16.
//   BF16  clamp(loss_scale * x, +-3.3895314e38) rounded to bfloat16.
//   FP8   row_dim > 0: fbgemm FP8 row-wise, uint8 rows of row_dim codes + fp32 scale + 4 zero
//         bytes; the forward codec uses 1-4-3, the backward one 1-5-2 unless fp8_bwd_uses_143.
//         Otherwise element-wise HFP8 (1-4-3, bias 15, |x| clamped to 0.9375), same shape.
//   INT8  fbgemm fused 8-bit row-wise, uint8 rows of row_dim codes + fp32 scale + fp32 bias.
// Element-wise formats keep the input's shape; row-wise ones encode to and decode from 1-D
// tensors (the original views the input as [-1, row_dim] and returns view(-1)), so the input's
// numel must be a multiple of row_dim.
// loss_scale is honoured for FP16 and BF16 only (otherwise logged under FERRY_DEBUG and
// dropped, as the original warns and drops it): encode multiplies before the clamp, decode
// divides the still-encoded values in half precision (one rounding to fp16 / bf16) and then
// widens. Reductions in the encoded dtype are the comm ops' business: quantized_dtype() is
// what they reduce in.
//
// Departures from the original, each for a case where the original is wrong or undefined:
//  - Non-finite values (codec_kernels.h): NaN stays NaN through every codec (HFP8 and FP8
//    row-wise turn NaN into a finite value in fbgemm, INT8 into whatever its min/max kernel
//    makes of it); FP8 row-wise keeps +-inf (fbgemm turns the whole row into NaN); an INT8 row
//    holding NaN or inf decodes to NaN throughout.
//  - Row layout and size: always the aligned GPU layout calc_quantized_size describes (fbgemm's
//    CPU kernels write unaligned rows when row_dim % 4 != 0, so their sizes disagree with
//    calc_quantized_size), and decode returns exactly row_dim values per row (fbgemm returns the
//    aligned count). Epsilon 1e-20 as the GPU kernels (fbgemm's CPU INT8 kernel uses 1e-8).
//    The int8 decode is code * scale + bias with two roundings, as fbgemm's CPU kernel (nvcc
//    fuses it into one FMA on the GPU).
//  - A null context is replaced by create_context()'s (the original encodes FP8 without a
//    context as HFP8 while calc_quantized_size expects row-wise sizes, and INT8 throws).
//    decode derives the row bytes from row_dim and rejects a context whose row_dim_quant
//    disagrees.
//  - INT8 honours a row_dim given to the constructor (the original ignores it and always uses
//    the context default 32; QCommsConfig never passes one, so the registry's codecs match).
//  - Errors are InvalidArgument naming the codec (and its op), never asserts: input_len not a
//    multiple of row_dim, a non-float32 input, a wire tensor of the wrong dtype or size, a loss
//    scale that is not finite and positive, MX4 (not provided by ferry).
#pragma once

#include <ferry/collectives/torchrec/comm/qcomm_codec.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::torchrec {

// torchrec CommType. MX4 is accepted by QCommsConfig (and falls back to FP16 / BF16 for reduce-
// scatter, as in the original) but ferry has no MX4 codec: making one throws InvalidArgument.
enum class CommType { FP32, FP16, BF16, FP8, INT8, MX4 };

// str(CommType): "fp32", "fp16", "bf16", "fp8", "int8", "mx4".
const char* comm_type_name(CommType type);
// The names above, case-insensitively; throws InvalidArgument naming the valid ones.
CommType comm_type_from_name(std::string_view name);

class FbgemmQuantizedCommCodec final : public QuantizedCommCodec {
 public:
  // fbgemm QuantizedCommCodec(comm_precision, loss_scale, row_dim, is_fwd). row_dim selects FP8
  // row-wise when > 0 and sets INT8's row dim (default 32); is_fwd picks FP8 row-wise's 1-4-3
  // (true) or 1-5-2 (false) layout. Throws InvalidArgument for MX4 and for a loss scale that
  // is not finite and positive.
  explicit FbgemmQuantizedCommCodec(CommType comm_precision,
                                    std::optional<double> loss_scale = std::nullopt,
                                    std::optional<int64_t> row_dim = std::nullopt,
                                    bool is_fwd = true);

  CommType comm_precision() const { return precision_; }
  std::optional<double> loss_scale() const { return loss_scale_; }  // after the drop rule
  int64_t row_dim() const { return row_dim_; }  // -1 when none was given
  bool is_fwd() const { return is_fwd_; }
  bool rowwise() const;  // INT8, or FP8 with row_dim > 0

  DType quantized_dtype() const override;
  int64_t calc_quantized_size(int64_t input_len,
                              const QuantizationContext* ctx = nullptr) const override;
  // Every precision gets a context (as the original): FP8 one with the codec's row_dim
  // (-1 for HFP8), INT8 one with its row_dim, the others the default.
  std::optional<QuantizationContext> create_context() const override;
  // FP8 row-wise pads every rank's dim sum to a multiple of row_dim, records the list in
  // ctx->padded_dim_sum_per_rank (ctx required) and returns this rank's (padded, padding);
  // the input must be [B, dim_per_rank[my_rank]]. Other precisions: (shape[1], 0).
  PaddedSize padded_size(const Tensor& input, const std::vector<int64_t>& dim_per_rank,
                         int my_rank, QuantizationContext* ctx) const override;
  std::string name() const override;

 protected:
  Tensor encode_impl(const Tensor& input, QuantizationContext* ctx) const override;
  Tensor decode_impl(const Tensor& input, QuantizationContext* ctx) const override;

 private:
  // The row dim of a row-wise codec for this call: ctx's, else create_context()'s; checked > 0.
  int64_t resolve_row_dim(const QuantizationContext* ctx, const char* what) const;

  CommType precision_;
  std::optional<double> loss_scale_;
  int64_t row_dim_;
  bool is_fwd_;
};

// torchrec QCommsConfig. Its __post_init__ rules are applied by get_qcomm_codecs: a backward
// FP8 without fp8_quantize_dim_bwd uses fp8_quantize_dim. (The original also warns, without
// acting on it, when FP8 dims are set but no precision is FP8; ferry logs the same.)
struct QCommsConfig {
  QCommsConfig() = default;
  // QCommsConfig(forward_precision=..., backward_precision=...), the common call; the other
  // fields are set by name afterwards. (A constructor rather than designated initializers:
  // GCC 12's -Wextra warns about every field a designated initializer leaves out.)
  QCommsConfig(CommType forward, CommType backward = CommType::FP32)
      : forward_precision(forward), backward_precision(backward) {}

  CommType forward_precision = CommType::FP32;
  CommType backward_precision = CommType::FP32;
  std::optional<double> forward_loss_scale;
  std::optional<double> backward_loss_scale;
  std::optional<int64_t> fp8_quantize_dim;      // FP8 forward: row-wise with this row dim
  std::optional<int64_t> fp8_quantize_dim_bwd;  // FP8 backward: row-wise with this row dim
  bool fp8_bwd_uses_143 = false;                // FP8 backward: 1-4-3 instead of 1-5-2
};

// forward / backward codecs of `config` (labelled "forward" / "backward" for telemetry); both
// no-op without a config. An FP32 config gives FP32 codecs, not no-op ones, as the original.
QuantizedCommCodecs get_qcomm_codecs(const std::optional<QCommsConfig>& config);

// CommOp name -> codecs, the qcomm_codecs_registry torchrec's sharders take.
using QCommCodecsRegistry = std::map<std::string, QuantizedCommCodecs>;

// torchrec get_qcomm_codecs_registry(qcomms_config, comm_ops, device): none when both
// precisions are FP32; otherwise one entry per op of `comm_ops` (default: the three CommOps),
// with the original's fallbacks: for POOLED_EMBEDDINGS_REDUCE_SCATTER a forward FP8 / MX4
// becomes FP16 and a backward one BF16; when `device` is "cpu" (a torch.device type, optionally
// with ":index"; "cuda" by default, as the original) BF16 becomes FP16 — gloo cannot reduce
// bf16. ferry reduces bf16 on the CPU, so that last rule only keeps a ported configuration's
// numerics; pass "cuda" to keep BF16. Each fallback is logged under FERRY_DEBUG. Codecs are
// labelled "<OP>/forward" and "<OP>/backward". Throws InvalidArgument for another device or
// for an op whose codec cannot be made (MX4 outside reduce-scatter).
std::optional<QCommCodecsRegistry> get_qcomm_codecs_registry(
    const QCommsConfig& qcomms_config,
    const std::optional<std::vector<CommOp>>& comm_ops = std::nullopt,
    std::string_view device = "cuda");

}  // namespace ferry::torchrec
