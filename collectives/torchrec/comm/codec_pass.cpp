#include <ferry/collectives/torchrec/comm/codec_pass.h>

#include <ferry/runtime/error.h>

namespace ferry::torchrec::detail {

CodecPass::CodecPass(std::shared_ptr<QuantizedCommCodec> codec, DType value_dtype,
                     Who who)
    : value_dtype_(value_dtype), who_(std::move(who)) {
  // A no-op codec would put float32 on the wire for float64 values; passing through keeps
  // them exact, which is what "no-op" promises.
  if (codec && !dynamic_cast<const NoOpQuantizedCommCodec*>(codec.get())) {
    codec_ = std::move(codec);
    ctx_ = codec_->create_context();
  }
}

DType CodecPass::wire_dtype() const {
  return codec_ ? codec_->quantized_dtype() : value_dtype_;
}

int64_t CodecPass::wire_size(int64_t values) const {
  if (!codec_) return values;
  try {
    return codec_->calc_quantized_size(values, ctx_ ? &*ctx_ : nullptr);
  } catch (...) {
    rethrow_with_prefix(std::current_exception(), who_() + ": ");
  }
}

std::vector<int64_t> CodecPass::wire_sizes(const std::vector<int64_t>& values) const {
  std::vector<int64_t> sizes;
  sizes.reserve(values.size());
  for (int64_t n : values) sizes.push_back(wire_size(n));
  return sizes;
}

Tensor CodecPass::encode(const Tensor& values) {
  if (!codec_) return values.flatten();
  const Tensor f32 = values.dtype() == DType::Float32 ? values : values.to(DType::Float32);
  try {
    return codec_->encode(f32.flatten(), ctx()).flatten();
  } catch (...) {
    rethrow_with_prefix(std::current_exception(), who_() + ": ");
  }
}

Tensor CodecPass::decode(const Tensor& wire) {
  if (!codec_) return wire.flatten();
  Tensor f32;
  try {
    f32 = codec_->decode(wire.flatten(), ctx()).flatten();
  } catch (...) {
    rethrow_with_prefix(std::current_exception(), who_() + ": ");
  }
  return f32.dtype() == value_dtype_ ? f32 : f32.to(value_dtype_);
}

void CodecPass::check_reducible(const char* op) const {
  const DType d = wire_dtype();
  const bool floating = d == DType::Float32 || d == DType::Float64 || d == DType::Float16 ||
                        d == DType::BFloat16;
  FERRY_CHECK(floating, InvalidArgument, who_(), " ", codec_ ? codec_->describe() : "", ": ", op,
              " sums in the encoded dtype, and ", dtype_name(d),
              " codes cannot be summed; use an FP32, FP16 or BF16 codec (torchrec's registry "
              "falls back to FP16 / BF16 for reduce-scatter)");
}

}  // namespace ferry::torchrec::detail
