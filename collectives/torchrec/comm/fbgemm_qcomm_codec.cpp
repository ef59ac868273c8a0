#include <ferry/collectives/torchrec/comm/fbgemm_qcomm_codec.h>

#include <ferry/collectives/torchrec/comm/codec_kernels.h>
#include <ferry/collectives/torchrec/comm/codec_telemetry.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <array>
#include <cctype>
#include <cmath>
#include <sstream>
#include <tuple>

namespace ferry::torchrec {
namespace {

constexpr const char* kSubsys = "codec";

constexpr std::array<std::pair<CommType, const char*>, 6> kCommTypes{{
    {CommType::FP32, "fp32"},
    {CommType::FP16, "fp16"},
    {CommType::BF16, "bf16"},
    {CommType::FP8, "fp8"},
    {CommType::INT8, "int8"},
    {CommType::MX4, "mx4"},
}};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<double> checked_loss_scale(CommType precision, std::optional<double> loss_scale) {
  if (!loss_scale) return std::nullopt;
  FERRY_CHECK(std::isfinite(*loss_scale) && *loss_scale > 0, InvalidArgument,
              "FbgemmQuantizedCommCodec(", comm_type_name(precision),
              "): loss_scale must be finite and positive, given ", *loss_scale);
  if (precision != CommType::FP16 && precision != CommType::BF16) {
    // fbgemm: "Setting loss scale for comm_precision=... is not supported. Overriding to None"
    FERRY_LOG(Info, kSubsys, "loss_scale ", *loss_scale, " is not supported for comm_precision ",
              comm_type_name(precision), ": dropped (only fp16 and bf16 honour it)");
    return std::nullopt;
  }
  return loss_scale;
}

detail::Wire16 wire16(CommType precision) {
  return precision == CommType::FP16 ? detail::Wire16::Fp16 : detail::Wire16::Bf16;
}

}  // namespace

const char* comm_type_name(CommType type) {
  for (const auto& [t, name] : kCommTypes)
    if (t == type) return name;
  FERRY_THROW(InvalidArgument, "CommType: not an enumerator (", static_cast<int>(type), ")");
}

CommType comm_type_from_name(std::string_view name) {
  const std::string wanted = lower(name);
  std::string valid;
  for (const auto& [t, n] : kCommTypes) {
    if (wanted == n) return t;
    valid += std::string(valid.empty() ? "" : ", ") + n;
  }
  FERRY_THROW(InvalidArgument, "CommType: unknown precision '", name, "'; expected one of ", valid);
}

FbgemmQuantizedCommCodec::FbgemmQuantizedCommCodec(CommType comm_precision,
                                                   std::optional<double> loss_scale,
                                                   std::optional<int64_t> row_dim, bool is_fwd)
    : precision_(comm_precision),
      loss_scale_(checked_loss_scale(comm_precision, loss_scale)),
      row_dim_(row_dim.value_or(-1)),
      is_fwd_(is_fwd) {
  FERRY_CHECK(comm_precision != CommType::MX4, InvalidArgument,
              "FbgemmQuantizedCommCodec: comm_precision mx4 is not provided by ferry (use fp8 or "
              "int8 for 8 bits or less per value)");
  (void)comm_type_name(comm_precision);  // rejects a value outside the enum
  FERRY_CHECK(comm_precision != CommType::INT8 || !row_dim || *row_dim > 0, InvalidArgument,
              "FbgemmQuantizedCommCodec(int8): row_dim must be positive, given ", *row_dim);
}

bool FbgemmQuantizedCommCodec::rowwise() const {
  return precision_ == CommType::INT8 || (precision_ == CommType::FP8 && row_dim_ > 0);
}

DType FbgemmQuantizedCommCodec::quantized_dtype() const {
  switch (precision_) {
    case CommType::FP32: return DType::Float32;
    case CommType::FP16: return DType::Float16;
    case CommType::BF16: return DType::BFloat16;
    default: return DType::UInt8;  // FP8 and INT8 (SparseType.as_dtype)
  }
}

std::optional<QuantizationContext> FbgemmQuantizedCommCodec::create_context() const {
  QuantizationContext ctx;
  if (precision_ == CommType::FP8) ctx.row_dim = row_dim_;
  if (precision_ == CommType::INT8 && row_dim_ > 0) ctx.row_dim = row_dim_;
  return ctx;
}

int64_t FbgemmQuantizedCommCodec::resolve_row_dim(const QuantizationContext* ctx,
                                                  const char* what) const {
  const int64_t row_dim = ctx ? ctx->row_dim : create_context()->row_dim;
  FERRY_CHECK(row_dim > 0, InvalidArgument, "codec ", describe(), ": ", what,
              " needs a context with a positive row_dim, given ", row_dim);
  return row_dim;
}

int64_t FbgemmQuantizedCommCodec::calc_quantized_size(int64_t input_len,
                                                      const QuantizationContext* ctx) const {
  FERRY_CHECK(input_len >= 0, InvalidArgument, "codec ", describe(),
              ": calc_quantized_size of a negative length ", input_len);
  if (!rowwise()) return input_len;
  const int64_t row_dim = resolve_row_dim(ctx, "calc_quantized_size");
  FERRY_CHECK(input_len % row_dim == 0, InvalidArgument, "codec ", describe(),
              ": calc_quantized_size: input_len ", input_len, " is not a multiple of row_dim ",
              row_dim, " (", input_len / row_dim, " rows and ", input_len % row_dim,
              " values left; a batch size that is a power of 2 usually avoids this)");
  return input_len / row_dim * detail::rowwise_row_bytes(row_dim);
}

PaddedSize FbgemmQuantizedCommCodec::padded_size(const Tensor& input,
                                                 const std::vector<int64_t>& dim_per_rank,
                                                 int my_rank, QuantizationContext* ctx) const {
  const int64_t dim_sum = padded_size_dim_sum(input, *this);
  if (input.dim() == 1 || !(precision_ == CommType::FP8 && row_dim_ > 0)) return {dim_sum, 0};
  FERRY_CHECK(ctx != nullptr, InvalidArgument, "codec ", describe(),
              ": padded_size records the padded dims in the context; none was given");
  const int64_t row_dim = resolve_row_dim(ctx, "padded_size");
  const int64_t world = static_cast<int64_t>(dim_per_rank.size());
  FERRY_CHECK(my_rank >= 0 && my_rank < world, InvalidArgument, "codec ", describe(),
              ": padded_size: my_rank ", my_rank, " is outside dim_per_rank (", world, " ranks)");
  FERRY_CHECK(input.dim() == 2 && dim_sum == dim_per_rank[static_cast<size_t>(my_rank)],
              InvalidArgument, "codec ", describe(), ": padded_size expects this rank's input [B, ",
              dim_per_rank[static_cast<size_t>(my_rank)], "], given ", shape_str(input.shape()));
  std::vector<int64_t> padded;
  padded.reserve(dim_per_rank.size());
  for (int64_t d : dim_per_rank) {
    FERRY_CHECK(d >= 0, InvalidArgument, "codec ", describe(),
                ": padded_size: negative dim in dim_per_rank: ", d);
    padded.push_back((d + row_dim - 1) / row_dim * row_dim);
  }
  const int64_t mine = padded[static_cast<size_t>(my_rank)];
  ctx->padded_dim_sum_per_rank = std::move(padded);
  return {mine, mine - dim_sum};
}

std::string FbgemmQuantizedCommCodec::name() const {
  std::ostringstream os;
  os << comm_type_name(precision_);
  if (precision_ == CommType::FP8)
    os << (row_dim_ > 0 ? (is_fwd_ ? " rowwise 1-4-3" : " rowwise 1-5-2") : " hfp8 1-4-3");
  if (precision_ == CommType::INT8) os << " rowwise";
  if (rowwise()) os << " (row_dim " << create_context()->row_dim << ")";
  if (loss_scale_) os << " (loss_scale " << *loss_scale_ << ")";
  return os.str();
}

Tensor FbgemmQuantizedCommCodec::encode_impl(const Tensor& input, QuantizationContext* ctx) const {
  FERRY_CHECK(input.defined() && input.dtype() == DType::Float32, InvalidArgument, "codec ",
              describe(), ": encode expects a float32 tensor, given ",
              input.defined() ? dtype_name(input.dtype()) : "an undefined tensor");
  const float* x = input.data<float>();
  const size_t n = static_cast<size_t>(input.numel());
  const float scale = static_cast<float>(loss_scale_.value_or(1.0));
  switch (precision_) {
    case CommType::FP32:
      return input;
    case CommType::FP16:
    case CommType::BF16: {
      Tensor out = empty(input.shape(), quantized_dtype());
      detail::encode_wire16(wire16(precision_), x, static_cast<uint16_t*>(out.raw_data()), n,
                            scale);
      return out;
    }
    default:
      break;
  }
  if (!rowwise()) {  // FP8 element-wise (HFP8)
    Tensor out = empty(input.shape(), DType::UInt8);
    detail::encode_hfp8(x, out.data<uint8_t>(), n);
    return out;
  }
  const int64_t row_dim = resolve_row_dim(ctx, "encode");
  const int64_t rows = input.numel() / row_dim;
  Tensor out = empty({calc_quantized_size(input.numel(), ctx)}, DType::UInt8);
  if (precision_ == CommType::INT8)
    detail::encode_int8_rowwise(x, out.data<uint8_t>(), rows, row_dim);
  else
    detail::encode_fp8_rowwise(x, out.data<uint8_t>(), rows, row_dim,
                               is_fwd_ ? detail::Fp8Layout::E4M3 : detail::Fp8Layout::E5M2);
  if (ctx) ctx->row_dim_quant = detail::rowwise_row_bytes(row_dim);
  return out;
}

Tensor FbgemmQuantizedCommCodec::decode_impl(const Tensor& input, QuantizationContext* ctx) const {
  const DType wire = quantized_dtype();
  FERRY_CHECK(input.defined() && input.dtype() == wire, InvalidArgument, "codec ", describe(),
              ": decode expects a ", dtype_name(wire), " tensor, given ",
              input.defined() ? dtype_name(input.dtype()) : "an undefined tensor");
  const size_t n = static_cast<size_t>(input.numel());
  switch (precision_) {
    case CommType::FP32:
      return input;
    case CommType::FP16:
    case CommType::BF16: {
      const auto* q = static_cast<const uint16_t*>(input.raw_data());
      Tensor out = empty(input.shape(), DType::Float32);
      float* y = out.data<float>();
      if (loss_scale_)
        detail::decode_wire16_divided(wire16(precision_), q, y, n,
                                      static_cast<float>(*loss_scale_));
      else
        detail::decode_wire16(wire16(precision_), q, y, n);
      return out;
    }
    default:
      break;
  }
  if (!rowwise()) {
    Tensor out = empty(input.shape(), DType::Float32);
    detail::decode_hfp8(input.data<uint8_t>(), out.data<float>(), n);
    return out;
  }
  const int64_t row_dim = resolve_row_dim(ctx, "decode");
  const int64_t row_bytes = detail::rowwise_row_bytes(row_dim);
  FERRY_CHECK(!ctx || ctx->row_dim_quant == -1 || ctx->row_dim_quant == row_bytes,
              InvalidArgument, "codec ", describe(), ": decode: the context's row_dim_quant ",
              ctx ? ctx->row_dim_quant : 0, " does not match row_dim ", row_dim, " (", row_bytes,
              " bytes per row)");
  FERRY_CHECK(input.numel() % row_bytes == 0, InvalidArgument, "codec ", describe(),
              ": decode: ", input.numel(), " bytes are not a whole number of ", row_bytes,
              "-byte rows (row_dim ", row_dim, ")");
  const int64_t rows = input.numel() / row_bytes;
  Tensor out = empty({rows * row_dim}, DType::Float32);
  if (precision_ == CommType::INT8)
    detail::decode_int8_rowwise(input.data<uint8_t>(), out.data<float>(), rows, row_dim);
  else
    detail::decode_fp8_rowwise(input.data<uint8_t>(), out.data<float>(), rows, row_dim,
                               is_fwd_ ? detail::Fp8Layout::E4M3 : detail::Fp8Layout::E5M2);
  return out;
}

// ---- QCommsConfig -> codecs ----

QuantizedCommCodecs get_qcomm_codecs(const std::optional<QCommsConfig>& config) {
  QuantizedCommCodecs codecs;
  if (config) {
    const QCommsConfig& c = *config;
    const bool fwd_fp8 = c.forward_precision == CommType::FP8;
    const bool bwd_fp8 = c.backward_precision == CommType::FP8;
    if (!fwd_fp8 && !bwd_fp8 && (c.fp8_quantize_dim || c.fp8_quantize_dim_bwd))
      FERRY_LOG(Info, kSubsys, "QCommsConfig: fp8_quantize_dim / fp8_quantize_dim_bwd are set but "
                "no precision is fp8: they are unused");
    // QCommsConfig.__post_init__: the backward row dim defaults to the forward one.
    const std::optional<int64_t> bwd_dim =
        bwd_fp8 && !c.fp8_quantize_dim_bwd ? c.fp8_quantize_dim : c.fp8_quantize_dim_bwd;
    codecs.forward = std::make_shared<FbgemmQuantizedCommCodec>(
        c.forward_precision, c.forward_loss_scale,
        fwd_fp8 ? c.fp8_quantize_dim : std::nullopt, /*is_fwd=*/true);
    codecs.backward = std::make_shared<FbgemmQuantizedCommCodec>(
        c.backward_precision, c.backward_loss_scale, bwd_fp8 ? bwd_dim : std::nullopt,
        /*is_fwd=*/c.fp8_bwd_uses_143);
  }
  codecs.forward->telemetry().set_label("forward");
  codecs.backward->telemetry().set_label("backward");
  return codecs;
}

std::optional<QCommCodecsRegistry> get_qcomm_codecs_registry(
    const QCommsConfig& qcomms_config, const std::optional<std::vector<CommOp>>& comm_ops,
    std::string_view device) {
  const std::string_view device_type = device.substr(0, device.find(':'));
  FERRY_CHECK(device_type == "cpu" || device_type == "cuda", InvalidArgument,
              "get_qcomm_codecs_registry: device must be \"cpu\" or \"cuda\" (optionally with "
              "\":index\"), given \"", device, "\"");
  if (qcomms_config.forward_precision == CommType::FP32 &&
      qcomms_config.backward_precision == CommType::FP32)
    return std::nullopt;

  const std::vector<CommOp> ops = comm_ops.value_or(std::vector<CommOp>{
      CommOp::POOLED_EMBEDDINGS_ALL_TO_ALL, CommOp::POOLED_EMBEDDINGS_REDUCE_SCATTER,
      CommOp::SEQUENCE_EMBEDDINGS_ALL_TO_ALL});
  QCommCodecsRegistry registry;
  for (CommOp op : ops) {
    QCommsConfig config = qcomms_config;
    const auto fall_back = [&](CommType& precision, CommType to, const char* direction,
                               const char* why) {
      FERRY_LOG(Info, kSubsys, comm_op_name(op), ": ", comm_type_name(precision), " is not ",
                "supported ", why, " for the ", direction, " pass: falling back to ",
                comm_type_name(to));
      precision = to;
    };
    if (op == CommOp::POOLED_EMBEDDINGS_REDUCE_SCATTER) {
      // Reduce-scatter sums on the wire: FP8 / MX4 codes cannot be added.
      for (auto [precision, to, direction] :
           {std::tuple{&config.forward_precision, CommType::FP16, "forward"},
            std::tuple{&config.backward_precision, CommType::BF16, "backward"}}) {
        if (*precision == CommType::FP8 || *precision == CommType::MX4)
          fall_back(*precision, to, direction, "by reduce-scatter");
      }
    }
    if (device_type == "cpu") {
      if (config.forward_precision == CommType::BF16)
        fall_back(config.forward_precision, CommType::FP16, "forward", "on cpu (gloo)");
      if (config.backward_precision == CommType::BF16)
        fall_back(config.backward_precision, CommType::FP16, "backward", "on cpu (gloo)");
    }
    QuantizedCommCodecs codecs;
    try {
      codecs = get_qcomm_codecs(config);
    } catch (const Error&) {
      rethrow_with_prefix(std::current_exception(),
                          std::string("get_qcomm_codecs_registry: ") + comm_op_name(op) + ": ");
    }
    codecs.forward->telemetry().set_label(std::string(comm_op_name(op)) + "/forward");
    codecs.backward->telemetry().set_label(std::string(comm_op_name(op)) + "/backward");
    registry[comm_op_name(op)] = std::move(codecs);
  }
  return registry;
}

}  // namespace ferry::torchrec
