#include <ferry/collectives/torchrec/comm/qcomm_codec.h>

#include <ferry/collectives/torchrec/comm/codec_telemetry.h>
#include <ferry/runtime/error.h>

#include <array>

namespace ferry::torchrec {
namespace {

struct CommOpNames {
  CommOp op;
  const char* name;
  const char* value;
};

constexpr std::array<CommOpNames, 3> kCommOps{{
    {CommOp::POOLED_EMBEDDINGS_ALL_TO_ALL, "POOLED_EMBEDDINGS_ALL_TO_ALL",
     "pooled_embeddings_all_to_all"},
    {CommOp::POOLED_EMBEDDINGS_REDUCE_SCATTER, "POOLED_EMBEDDINGS_REDUCE_SCATTER",
     "pooled_embeddings_reduce_scatter"},
    {CommOp::SEQUENCE_EMBEDDINGS_ALL_TO_ALL, "SEQUENCE_EMBEDDINGS_ALL_TO_ALL",
     "sequence_embeddings_all_to_all"},
}};

const CommOpNames& names_of(CommOp op) {
  for (const CommOpNames& n : kCommOps)
    if (n.op == op) return n;
  FERRY_THROW(InvalidArgument, "CommOp: not an enumerator (", static_cast<int>(op), ")");
}

}  // namespace

QuantizedCommCodec::QuantizedCommCodec() : telemetry_(std::make_unique<CodecTelemetry>()) {}

QuantizedCommCodec::~QuantizedCommCodec() = default;

Tensor QuantizedCommCodec::encode(const Tensor& input, QuantizationContext* ctx) const {
  Tensor wire = encode_impl(input, ctx);
  if (telemetry_->enabled() && is_floating(input.dtype())) {
    // The round trip runs on a copy of the context: the caller's must stay as encode left it.
    std::optional<QuantizationContext> scratch;
    if (ctx) scratch = *ctx;
    const Tensor back = decode_impl(wire, scratch ? &*scratch : nullptr);
    telemetry_->record(relative_error(input, back), input.numel(), name());
  }
  return wire;
}

Tensor QuantizedCommCodec::decode(const Tensor& input, QuantizationContext* ctx) const {
  return decode_impl(input, ctx);
}

std::string QuantizedCommCodec::describe() const {
  const std::string label = telemetry_->label();
  return label.empty() ? name() : name() + " [" + label + "]";
}

int64_t padded_size_dim_sum(const Tensor& input, const QuantizedCommCodec& codec) {
  FERRY_CHECK(input.defined() && input.dim() >= 1, InvalidArgument, "codec ", codec.describe(),
              ": padded_size needs a 1-D or 2-D input, given ",
              input.defined() ? shape_str(input.shape()) : std::string("an undefined tensor"));
  return input.dim() == 1 ? input.size(0) : input.size(1);
}

int64_t NoOpQuantizedCommCodec::calc_quantized_size(int64_t input_len,
                                                    const QuantizationContext*) const {
  return input_len;
}

PaddedSize NoOpQuantizedCommCodec::padded_size(const Tensor& input, const std::vector<int64_t>&,
                                               int, QuantizationContext*) const {
  return {padded_size_dim_sum(input, *this), 0};
}

const char* comm_op_name(CommOp op) { return names_of(op).name; }

const char* comm_op_value(CommOp op) { return names_of(op).value; }

CommOp comm_op_from_name(std::string_view name) {
  std::string valid;
  for (const CommOpNames& n : kCommOps) {
    if (name == n.name || name == n.value) return n.op;
    valid += std::string(valid.empty() ? "" : ", ") + n.name;
  }
  FERRY_THROW(InvalidArgument, "CommOp: unknown op '", name, "'; expected one of ", valid,
              " (or their lower-case values)");
}

}  // namespace ferry::torchrec
