// The codec protocol on tensors (hand-computed values and more): shapes, dtypes, sizes, loss_scale, round-trip
// error bounds per precision, NaN / inf, FP8 row-wise padding and bad input.
#include <ferry/collectives/torchrec/torchrec.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec;
using Catch::Matchers::Contains;

namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> round_trip(const QuantizedCommCodec& codec, const Tensor& x) {
  std::optional<QuantizationContext> ctx = codec.create_context();
  QuantizationContext* c = ctx ? &*ctx : nullptr;
  const Tensor wire = codec.encode(x, c);
  REQUIRE(wire.dtype() == codec.quantized_dtype());
  REQUIRE(wire.numel() == codec.calc_quantized_size(x.numel(), c));
  const Tensor back = codec.decode(wire, c);
  REQUIRE(back.dtype() == DType::Float32);
  REQUIRE(back.numel() == x.numel());
  return back.to_vector<float>();
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  FAIL("no InvalidArgument thrown");
  return "";
}

}  // namespace

TEST_CASE("no-op codec: identity, float32, same size, no context", "[codecs]") {
  NoOpQuantizedCommCodec codec;
  const Tensor x = tensor<float>({1.0f, -2.0f, 3.0f});
  const Tensor wire = codec.encode(x);
  CHECK(wire.shares_storage_with(x));
  CHECK(codec.decode(wire).shares_storage_with(x));
  CHECK(codec.quantized_dtype() == DType::Float32);
  CHECK(codec.calc_quantized_size(77) == 77);
  CHECK_FALSE(codec.create_context().has_value());
  CHECK(codec.padded_size(x, {3, 5}, 0, nullptr) == PaddedSize{3, 0});
  CHECK(codec.padded_size(zeros({4, 6}), {6, 2}, 0, nullptr) == PaddedSize{6, 0});
  // QuantizedCommCodecs defaults to a no-op codec in both directions.
  const QuantizedCommCodecs codecs;
  CHECK(codecs.forward->name() == "no-op");
  CHECK(codecs.backward->name() == "no-op");
  CHECK(codecs.forward != codecs.backward);
}

TEST_CASE("FP32 codec: encode and decode return their input", "[codecs]") {
  FbgemmQuantizedCommCodec codec(CommType::FP32, /*loss_scale=*/4.0);
  CHECK_FALSE(codec.loss_scale().has_value());  // dropped: only fp16 / bf16 honour it
  const Tensor x = tensor<float>({1.5f, kNaN});
  CHECK(codec.encode(x).shares_storage_with(x));
  CHECK(codec.decode(x).shares_storage_with(x));
  CHECK(codec.calc_quantized_size(10) == 10);
  CHECK(codec.create_context()->row_dim == kRowDimDefault);
}

TEST_CASE("FP16 codec: hand-computed values with and without loss scale, shape kept", "[codecs]") {
  const Tensor x = from_vector<float>({1.0f, 70000.0f, -1e6f, 0.1f}, {2, 2});
  FbgemmQuantizedCommCodec plain(CommType::FP16);
  const Tensor wire = plain.encode(x);
  CHECK(wire.shape() == Shape{2, 2});
  CHECK(wire.dtype() == DType::Float16);
  const Tensor y = plain.decode(wire);
  CHECK(y.shape() == Shape{2, 2});
  CHECK(y.to_vector<float>() == std::vector<float>{1, 65504, -65504, 0.0999755859375f});
  FbgemmQuantizedCommCodec scaled(CommType::FP16, 2.0);
  CHECK(round_trip(scaled, x) == std::vector<float>{1, 32752, -32752, 0.0999755859375f});
  CHECK(scaled.name() == "fp16 (loss_scale 2)");
}

TEST_CASE("loss scale: honoured by FP16 / BF16, dropped elsewhere, checked", "[codecs]") {
  FbgemmQuantizedCommCodec bf16(CommType::BF16, 2.0);
  CHECK(round_trip(bf16, tensor<float>({1.0f, 3e38f, 0.1f})) ==
        std::vector<float>{1.0f, 0x1.fep+126f, 0.10009765625f});
  // A scale below 1 can overflow the division in half precision: 70000 * 0.5 -> 35008 in
  // fp16, / 0.5 = 70016 -> inf. The original's arithmetic; the clamp only guards encode.
  FbgemmQuantizedCommCodec small(CommType::FP16, 0.5);
  CHECK(round_trip(small, tensor<float>({70000.0f}))[0] == kInf);
  for (CommType t : {CommType::FP32, CommType::FP8, CommType::INT8})
    CHECK_FALSE(FbgemmQuantizedCommCodec(t, 8.0).loss_scale().has_value());
  CHECK(FbgemmQuantizedCommCodec(CommType::BF16, 8.0).loss_scale() == 8.0);
  for (double bad : {0.0, -1.0, std::nan(""), 1.0 / 0.0})
    CHECK_THROWS_AS(FbgemmQuantizedCommCodec(CommType::FP16, bad), InvalidArgument);
}

TEST_CASE("round-trip error bounds per precision", "[codecs]") {
  const Tensor x = normal({64, 32}, 0.0, 1.0, /*seed=*/5);
  const std::vector<float> in = x.to_vector<float>();
  const auto check_each = [&](const std::vector<float>& out, auto bound) {
    for (size_t i = 0; i < in.size(); ++i) {
      INFO("x = " << in[i] << ", decoded " << out[i]);
      REQUIRE(std::fabs(out[i] - in[i]) <= bound(i));
    }
  };
  SECTION("fp16: half an ulp of 11 bits") {
    check_each(round_trip(FbgemmQuantizedCommCodec(CommType::FP16), x),
               [&](size_t i) { return std::max(std::fabs(in[i]) * 0x1p-11f, 0x1p-25f); });
  }
  SECTION("bf16: half an ulp of 8 bits") {
    check_each(round_trip(FbgemmQuantizedCommCodec(CommType::BF16), x),
               [&](size_t i) { return std::fabs(in[i]) * 0x1p-8f; });
  }
  SECTION("int8 row-wise: half a step (range / 255) of the row") {
    FbgemmQuantizedCommCodec codec(CommType::INT8);
    const std::vector<float> out = round_trip(codec, x);
    check_each(out, [&](size_t i) {
      const size_t row = i / 32;
      const auto [lo, hi] = std::minmax_element(in.begin() + 32 * row, in.begin() + 32 * row + 32);
      return (*hi - *lo) / 510.0f * 1.001f;
    });
  }
  SECTION("fp8 row-wise: 3 (1-4-3) or 2 (1-5-2) mantissa bits relative to the row") {
    for (bool fwd : {true, false}) {
      const std::vector<float> out =
          round_trip(FbgemmQuantizedCommCodec(CommType::FP8, {}, 32, fwd), x);
      check_each(out, [&](size_t i) {
        const size_t row = i / 32;
        float m = 0;
        for (size_t j = 32 * row; j < 32 * row + 32; ++j) m = std::max(m, std::fabs(in[j]));
        const float grid = m * (fwd ? 0x1p-14f : 0x1p-29f);  // subnormal step, relative to max
        return std::max(std::fabs(in[i]) * (fwd ? 0x1p-4f : 0x1p-3f), grid) * 1.001f;
      });
    }
  }
  SECTION("hfp8: 3 mantissa bits inside (-0.9375, 0.9375)") {
    const Tensor small = uniform({1000}, -0.9, 0.9, 3);
    const std::vector<float> s = small.to_vector<float>();
    const std::vector<float> out = round_trip(FbgemmQuantizedCommCodec(CommType::FP8), small);
    for (size_t i = 0; i < s.size(); ++i)
      REQUIRE(std::fabs(out[i] - s[i]) <= std::max(std::fabs(s[i]) * 0x1p-4f, 0x1p-18f));
  }
}

TEST_CASE("calc_quantized_size is exact: fbgemm's aligned rows", "[codecs]") {
  FbgemmQuantizedCommCodec int8(CommType::INT8);
  QuantizationContext ctx = *int8.create_context();
  CHECK(ctx.row_dim == 32);
  CHECK(int8.calc_quantized_size(64, &ctx) == 80);  // 2 rows of 32 + 8 (a scale and bias per row)
  CHECK(int8.calc_quantized_size(0, &ctx) == 0);
  ctx.row_dim = 30;  // aligned to 32 codes + 8
  CHECK(int8.calc_quantized_size(60, &ctx) == 80);
  FbgemmQuantizedCommCodec fp8(CommType::FP8, {}, 256);
  CHECK(fp8.calc_quantized_size(4096, nullptr) == 16 * 264);
  CHECK(FbgemmQuantizedCommCodec(CommType::FP8).calc_quantized_size(4096) == 4096);
  CHECK(FbgemmQuantizedCommCodec(CommType::BF16).calc_quantized_size(4097) == 4097);
  // encode writes exactly that many bytes and records the row width in the context.
  QuantizationContext c30 = ctx;
  const Tensor wire = int8.encode(normal({60}, 0, 1, 1), &c30);
  CHECK(wire.shape() == Shape{80});
  CHECK(c30.row_dim_quant == 40);
  CHECK(int8.decode(wire, &c30).shape() == Shape{60});  // row_dim values per row, not 32
  CHECK(FbgemmQuantizedCommCodec(CommType::INT8, {}, 8).create_context()->row_dim == 8);
}

TEST_CASE("NaN and inf through each codec", "[codecs]") {
  const Tensor x = tensor<float>({kNaN, kInf, -kInf, 0.25f});
  std::vector<float> y = round_trip(FbgemmQuantizedCommCodec(CommType::FP16), x);
  CHECK(std::isnan(y[0]));
  CHECK(std::vector<float>(y.begin() + 1, y.end()) == std::vector<float>{65504, -65504, 0.25f});
  y = round_trip(FbgemmQuantizedCommCodec(CommType::BF16), x);
  CHECK(std::isnan(y[0]));
  CHECK(std::vector<float>(y.begin() + 1, y.end()) ==
        std::vector<float>{3.38953139e38f, -3.38953139e38f, 0.25f});
  y = round_trip(FbgemmQuantizedCommCodec(CommType::FP8), x);
  CHECK(std::isnan(y[0]));
  CHECK(std::vector<float>(y.begin() + 1, y.end()) == std::vector<float>{0.9375f, -0.9375f, 0.25f});
  y = round_trip(FbgemmQuantizedCommCodec(CommType::FP8, {}, 4), x);
  CHECK(std::isnan(y[0]));
  CHECK(std::vector<float>(y.begin() + 1, y.end()) == std::vector<float>{kInf, -kInf, 0.25f});
  // INT8: the row holding them is NaN, the next row is not.
  FbgemmQuantizedCommCodec int8(CommType::INT8, {}, 4);
  y = round_trip(int8, tensor<float>({kNaN, 1.0f, 2.0f, 3.0f, 0.0f, 1.0f, 2.0f, 3.0f}));
  for (int i = 0; i < 4; ++i) CHECK(std::isnan(y[static_cast<size_t>(i)]));
  CHECK(y[4] == 0.0f);
  CHECK(y[7] == 3.0f);
}

TEST_CASE("FP8 row-wise padding (padded_size) and a padded round trip", "[codecs]") {
  FbgemmQuantizedCommCodec codec(CommType::FP8, {}, 256);
  QuantizationContext ctx = *codec.create_context();
  const Tensor x = uniform({16, 259}, -1.0, 1.0, 9);
  CHECK(codec.padded_size(x, {259, 131}, 0, &ctx) == PaddedSize{512, 253});
  REQUIRE(ctx.padded_dim_sum_per_rank.has_value());
  CHECK(*ctx.padded_dim_sum_per_rank == std::vector<int64_t>{512, 256});
  QuantizationContext other = *codec.create_context();
  CHECK(codec.padded_size(zeros({3, 131}), {259, 131}, 1, &other) == PaddedSize{256, 125});
  CHECK(codec.padded_size(zeros({8}), {259, 131}, 0, &other) == PaddedSize{8, 0});  // 1-D
  // Without padding 16 * 259 values are not whole rows; padded, they are 32 rows of 256.
  CHECK_THROWS_AS(codec.calc_quantized_size(16 * 259, &ctx), InvalidArgument);
  CHECK(codec.calc_quantized_size(16 * 512, &ctx) == 32 * 264);
  Tensor padded = zeros({16, 512});
  for (int64_t b = 0; b < 16; ++b)
    std::memcpy(padded.data<float>() + b * 512, x.data<float>() + b * 259, 259 * sizeof(float));
  const Tensor wire = codec.encode(padded, &ctx);
  CHECK(wire.numel() == 32 * 264);
  const std::vector<float> back = codec.decode(wire, &ctx).to_vector<float>();
  const std::vector<float> in = x.to_vector<float>();
  for (int64_t b = 0; b < 16; ++b)
    for (int64_t d = 0; d < 259; ++d)
      REQUIRE(back[static_cast<size_t>(b * 512 + d)] ==
              Approx(in[static_cast<size_t>(b * 259 + d)]).margin(1.0 / 16));
  // Codecs that do not pad return (dim sum, 0) and leave the context alone.
  FbgemmQuantizedCommCodec int8(CommType::INT8);
  QuantizationContext c8 = *int8.create_context();
  CHECK(int8.padded_size(x, {259, 131}, 0, &c8) == PaddedSize{259, 0});
  CHECK_FALSE(c8.padded_dim_sum_per_rank.has_value());
}

TEST_CASE("bad input: InvalidArgument naming the codec and the values", "[codecs][bad-input]") {
  FbgemmQuantizedCommCodec int8(CommType::INT8);
  QuantizationContext ctx = *int8.create_context();
  std::string m = message_of([&] { int8.calc_quantized_size(100, &ctx); });
  CHECK_THAT(m, Contains("int8 rowwise (row_dim 32)") && Contains("input_len 100") &&
                    Contains("not a multiple of row_dim 32"));
  m = message_of([&] { int8.encode(zeros({3, 10}), &ctx); });
  CHECK_THAT(m, Contains("input_len 30"));
  m = message_of([&] { int8.encode(zeros({32}, DType::Float64), &ctx); });
  CHECK_THAT(m, Contains("expects a float32 tensor, given float64"));
  m = message_of([&] { int8.decode(zeros({40}, DType::Float16), &ctx); });
  CHECK_THAT(m, Contains("decode expects a uint8 tensor, given float16"));
  m = message_of([&] { int8.decode(zeros({41}, DType::UInt8), &ctx); });
  CHECK_THAT(m, Contains("41 bytes are not a whole number of 40-byte rows"));
  QuantizationContext wrong = ctx;
  wrong.row_dim_quant = 24;
  m = message_of([&] { int8.decode(zeros({40}, DType::UInt8), &wrong); });
  CHECK_THAT(m, Contains("row_dim_quant 24 does not match row_dim 32"));
  FbgemmQuantizedCommCodec fp8(CommType::FP8, {}, 16);
  QuantizationContext hfp8_ctx;
  hfp8_ctx.row_dim = -1;
  m = message_of([&] { fp8.encode(zeros({16}), &hfp8_ctx); });
  CHECK_THAT(m, Contains("fp8 rowwise 1-4-3 (row_dim 16)") && Contains("positive row_dim"));
  m = message_of([&] { fp8.padded_size(zeros({2, 5}), {5, 7}, 0, nullptr); });
  CHECK_THAT(m, Contains("none was given"));
  QuantizationContext c16 = *fp8.create_context();
  m = message_of([&] { fp8.padded_size(zeros({2, 6}), {5, 7}, 0, &c16); });
  CHECK_THAT(m, Contains("expects this rank's input [B, 5], given [2, 6]"));
  m = message_of([&] { fp8.padded_size(zeros({2, 5}), {5, 7}, 2, &c16); });
  CHECK_THAT(m, Contains("my_rank 2 is outside dim_per_rank (2 ranks)"));
  m = message_of([&] { FbgemmQuantizedCommCodec bad(CommType::MX4); });
  CHECK_THAT(m, Contains("mx4 is not provided"));
  m = message_of([&] { FbgemmQuantizedCommCodec bad(CommType::INT8, {}, 0); });
  CHECK_THAT(m, Contains("row_dim must be positive, given 0"));
}
