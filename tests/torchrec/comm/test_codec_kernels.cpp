// Bit patterns and byte layouts of the codec kernels (collectives/torchrec/comm/codec_kernels.h),
// against hand-computed encodings and independent reference conversions: Eigen's half and
// bfloat16 (the runtime's types) and a frexp-based model of fbgemm's HFP8 rounding.
#include <ferry/collectives/torchrec/comm/codec_kernels.h>
#include <ferry/runtime/dtype.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec::detail;

namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

uint16_t enc16(float x, bool bf16, float scale = 1.0f) {
  uint16_t h = 0;
  encode_wire16(bf16 ? Wire16::Bf16 : Wire16::Fp16, &x, &h, 1, scale);
  return h;
}

float dec16(uint16_t h, bool bf16) {
  float y = 0;
  decode_wire16(bf16 ? Wire16::Bf16 : Wire16::Fp16, &h, &y, 1);
  return y;
}

uint8_t enc_hfp8(float x) {
  uint8_t q = 0;
  encode_hfp8(&x, &q, 1);
  return q;
}

float dec_hfp8(uint8_t q) {
  float y = 0;
  decode_hfp8(&q, &y, 1);
  return y;
}

float load_float(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// fbgemm's HFP8 code of a finite float, modelled in double arithmetic: clamp the magnitude to
// the largest value, then round to nearest even either on the subnormal grid 2^(1-bias-mbits)
// or to mbits mantissa bits in the value's binade.
uint8_t reference_hfp8(float x, int ebits, int bias) {
  const int mbits = 7 - ebits;
  const double max_pos = std::ldexp(2.0 - std::ldexp(1.0, -mbits), (1 << ebits) - 2 - bias);
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::min(std::fabs(static_cast<double>(x)), max_pos);
  if (a < std::ldexp(1.0, 1 - bias))
    return sign | static_cast<uint8_t>(std::nearbyint(std::ldexp(a, bias - 1 + mbits)));
  int e = 0;
  const double frac = std::frexp(a, &e);  // a = frac * 2^e, frac in [0.5, 1)
  double m = std::nearbyint((frac * 2 - 1) * (1 << mbits));
  --e;  // a = (1 + m / 2^mbits) * 2^e
  if (m == (1 << mbits)) {
    m = 0;
    ++e;
  }
  return sign | static_cast<uint8_t>(((e + bias) << mbits) | static_cast<int>(m));
}

// A row of row_dim values whose largest magnitude is the format's max_pos, so the row scale is
// exactly 1 (max_pos / (1e-20 + max_pos) rounds to 1) and the codes are plain HFP8 codes.
std::vector<uint8_t> fp8_rows_unit_scale(std::vector<float> values, Fp8Layout layout) {
  values.push_back(layout == Fp8Layout::E4M3 ? kHfp8MaxE4M3 : kHfp8MaxE5M2);
  const auto row_dim = static_cast<int64_t>(values.size());
  std::vector<uint8_t> out(static_cast<size_t>(rowwise_row_bytes(row_dim)));
  encode_fp8_rowwise(values.data(), out.data(), 1, row_dim, layout);
  REQUIRE(load_float(out.data() + out.size() - 8) == 1.0f);
  return out;
}

}  // namespace

TEST_CASE("fp16 kernel: hand-computed values and the original's clamp", "[kernels]") {
  const std::vector<float> x{1.0f, 70000.0f, -1e6f, 0.1f};
  std::vector<uint16_t> h(4);
  std::vector<float> y(4);
  encode_wire16(Wire16::Fp16, x.data(), h.data(), 4, 1.0f);
  CHECK(h == std::vector<uint16_t>{0x3C00, 0x7BFF, 0xFBFF, 0x2E66});
  decode_wire16(Wire16::Fp16, h.data(), y.data(), 4);
  CHECK(y == std::vector<float>{1.0f, 65504.0f, -65504.0f, 0.0999755859375f});
  // loss scale 2: scaled before the clamp, divided in half precision after.
  encode_wire16(Wire16::Fp16, x.data(), h.data(), 4, 2.0f);
  decode_wire16_divided(Wire16::Fp16, h.data(), y.data(), 4, 2.0f);
  CHECK(y == std::vector<float>{1.0f, 32752.0f, -32752.0f, 0.0999755859375f});
  // Subnormal halves and round-to-nearest-even ties on both grids.
  CHECK(enc16(0x1p-24f, false) == 0x0001);
  CHECK(enc16(0x1.8p-24f, false) == 0x0002);  // 1.5 steps: tie to even
  CHECK(enc16(0x1p-25f, false) == 0x0000);    // half a step: tie to even (0)
  CHECK(enc16(1.0f + 0x1p-11f, false) == 0x3C00);
  CHECK(enc16(1.0f + 0x3p-11f, false) == 0x3C02);
  CHECK(enc16(65519.0f, false) == 0x7BFF);
  CHECK(dec16(0x0001, false) == 0x1p-24f);
  CHECK(dec16(0x8400, false) == -0x1p-14f);
}

TEST_CASE("fp16 kernel: NaN stays NaN, +-inf clamp to +-65504", "[kernels]") {
  CHECK(enc16(kNaN, false) == 0x7E00);
  CHECK(enc16(-kNaN, false) == 0xFE00);
  CHECK(enc16(kInf, false) == 0x7BFF);
  CHECK(enc16(-kInf, false) == 0xFBFF);
  CHECK(std::isnan(dec16(0x7E00, false)));
  CHECK(dec16(0x7C00, false) == kInf);
  // Without the clamp (the loss-scale division) a quotient beyond 65520 overflows to inf.
  const uint16_t h = 0x7BFF;
  float y = 0;
  decode_wire16_divided(Wire16::Fp16, &h, &y, 1, 0.5f);
  CHECK(y == kInf);
}

TEST_CASE("fp16 / bf16 kernels agree with Eigen's correctly rounded conversions", "[kernels]") {
  // Every 16-bit pattern decodes as Eigen widens it.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const auto p = static_cast<uint16_t>(b);
    const float h = static_cast<float>(std::bit_cast<half>(p));
    const float bf = static_cast<float>(std::bit_cast<bfloat16>(p));
    if (std::isnan(h)) {
      REQUIRE(std::isnan(dec16(p, false)));
    } else {
      REQUIRE(std::bit_cast<uint32_t>(dec16(p, false)) == std::bit_cast<uint32_t>(h));
    }
    REQUIRE(std::bit_cast<uint32_t>(dec16(p, true)) == std::bit_cast<uint32_t>(bf));
  }
  // A stride through all float patterns: clamp, then round as Eigen does.
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 65521) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(u));
    if (std::isnan(x)) continue;
    const float c16 = std::clamp(x, -kFp16Max, kFp16Max);
    const float cbf = std::clamp(x, -kBf16Max, kBf16Max);
    REQUIRE(enc16(x, false) == std::bit_cast<uint16_t>(half(c16)));
    REQUIRE(enc16(x, true) == std::bit_cast<uint16_t>(bfloat16(cbf)));
  }
}

TEST_CASE("bf16 kernel: clamp, round to nearest even, NaN -> 0x7FC0", "[kernels]") {
  CHECK(enc16(1.0f, true) == 0x3F80);
  CHECK(enc16(0.1f, true) == 0x3DCD);              // 0x3DCCCCCD rounds up
  CHECK(enc16(std::bit_cast<float>(0x3F808000u), true) == 0x3F80);  // tie, even stays
  CHECK(enc16(std::bit_cast<float>(0x3F818000u), true) == 0x3F82);  // tie, odd rounds up
  CHECK(enc16(3.4e38f, true) == 0x7F7F);
  CHECK(enc16(kInf, true) == 0x7F7F);
  CHECK(enc16(-kInf, true) == 0xFF7F);
  CHECK(enc16(kNaN, true) == 0x7FC0);
  CHECK(enc16(-kNaN, true) == 0x7FC0);
  CHECK(dec16(0x7F7F, true) == kBf16Max);
  // Loss scale 2: 0.1 * 2 -> bf16 0x3E4D, / 2 in bf16 -> 0x3DCD = 0.10009765625.
  const uint16_t b = enc16(0.1f, true, 2.0f);
  CHECK(b == 0x3E4D);
  float y = 0;
  decode_wire16_divided(Wire16::Bf16, &b, &y, 1, 2.0f);
  CHECK(y == 0.10009765625f);
}

TEST_CASE("hfp8 kernel (1-4-3, bias 15): hand-computed codes", "[kernels]") {
  CHECK(enc_hfp8(0.9375f) == 0x77);   // exponent 14, mantissa 7: the largest code
  CHECK(enc_hfp8(1.0f) == 0x77);      // clamped to max_pos
  CHECK(enc_hfp8(-2.0f) == 0xF7);
  CHECK(enc_hfp8(0.5f) == 0x70);
  CHECK(enc_hfp8(0.3f) == 0x6A);      // 1.2 * 2^-2 -> mantissa 1.6/8 rounds to 2/8: 0.3125
  CHECK(enc_hfp8(0.53125f) == 0x70);  // 0.5 * (1 + 1/16): tie, to even mantissa 0
  CHECK(enc_hfp8(0.59375f) == 0x72);  // 0.5 * (1 + 3/16): tie, to even mantissa 2
  CHECK(enc_hfp8(0x1p-14f) == 0x08);  // smallest normal
  CHECK(enc_hfp8(0x1p-17f) == 0x01);  // smallest subnormal
  CHECK(enc_hfp8(0x1.8p-17f) == 0x02);  // subnormal tie to even
  CHECK(enc_hfp8(0x1p-18f) == 0x00);
  CHECK(enc_hfp8(0.0f) == 0x00);
  CHECK(enc_hfp8(-0.0f) == 0x80);
  CHECK(dec_hfp8(0x6A) == 0.3125f);
  CHECK(dec_hfp8(0x77) == 0.9375f);
  CHECK(dec_hfp8(0xF7) == -0.9375f);
  CHECK(dec_hfp8(0x01) == 0x1p-17f);
  CHECK(dec_hfp8(0x87) == -7 * 0x1p-17f);
  CHECK(dec_hfp8(0x08) == 0x1p-14f);
}

TEST_CASE("hfp8 kernel: NaN gets ferry's reserved code, +-inf clamp", "[kernels]") {
  CHECK(enc_hfp8(kNaN) == kHfp8NaN);
  CHECK(enc_hfp8(-kNaN) == kHfp8NaN);
  CHECK(enc_hfp8(kInf) == 0x77);
  CHECK(enc_hfp8(-kInf) == 0xF7);
  CHECK(std::isnan(dec_hfp8(0x7F)));
  CHECK(std::isnan(dec_hfp8(0xFF)));
  CHECK(dec_hfp8(0x7E) == kInf);
  CHECK(dec_hfp8(0xFE) == -kInf);
}

TEST_CASE("hfp8 kernels match the reference rounding model, both layouts", "[kernels]") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> wide(-1.2f, 1.2f);
  std::uniform_int_distribution<int> exponent(-40, 0);
  std::vector<float> x(20000);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = i % 2 ? wide(rng) : std::ldexp(wide(rng), exponent(rng));
  std::vector<uint8_t> q(x.size());
  encode_hfp8(x.data(), q.data(), x.size());
  std::vector<float> back(x.size());
  decode_hfp8(q.data(), back.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    INFO("x = " << x[i]);
    REQUIRE(q[i] == reference_hfp8(x[i], 4, 15));
    REQUIRE(std::fabs(back[i] - x[i]) <= std::max(std::fabs(x[i]) * 0x1p-4f, 0x1p-18f) +
                                             std::max(0.0f, std::fabs(x[i]) - kHfp8MaxE4M3));
  }
  // 1-5-2 (bias 31) through unit-scale rows; the row's max itself is the last code.
  std::vector<float> small(x.begin(), x.begin() + 64);
  for (float& v : small) v = std::clamp(v, -0.8f, 0.8f);
  const std::vector<uint8_t> row = fp8_rows_unit_scale(small, Fp8Layout::E5M2);
  for (size_t i = 0; i < small.size(); ++i) REQUIRE(row[i] == reference_hfp8(small[i], 5, 31));
  CHECK(row[small.size()] == 0x7B);
}

TEST_CASE("fp8 row-wise: byte layout, 1-4-3 and 1-5-2 codes, scale", "[kernels]") {
  // Max 0.9375: scale 1, codes are HFP8 codes; 4 values need no padding.
  std::vector<float> x{-0.46875f, 0.0f, 0.1f};
  std::vector<uint8_t> row = fp8_rows_unit_scale(x, Fp8Layout::E4M3);
  REQUIRE(row.size() == 12);
  CHECK(std::vector<uint8_t>(row.begin(), row.begin() + 4) ==
        std::vector<uint8_t>{0xEF, 0x00, 0x5D, 0x77});
  CHECK(load_float(row.data() + 8) == 0.0f);  // the unused bias slot is zeroed
  std::vector<float> y(4);
  decode_fp8_rowwise(row.data(), y.data(), 1, 4, Fp8Layout::E4M3);
  CHECK(y == std::vector<float>{-0.46875f, 0.0f, 0.1015625f, 0.9375f});

  // 1-5-2: 0.5 -> 0x78, 2^-30 (smallest normal) -> 0x04, 2^-32 -> 0x01, 0.875 -> 0x7B.
  row = fp8_rows_unit_scale({0.5f, 0x1p-30f, 0x1p-32f}, Fp8Layout::E5M2);
  CHECK(std::vector<uint8_t>(row.begin(), row.begin() + 4) ==
        std::vector<uint8_t>{0x78, 0x04, 0x01, 0x7B});

  // Two values, max 2: scale 0.46875, codes of 0.9375 and 0.46875, two zero padding bytes.
  const std::vector<float> two{2.0f, 1.0f};
  std::vector<uint8_t> q(static_cast<size_t>(rowwise_row_bytes(2)), 0xAA);
  REQUIRE(q.size() == 12);
  encode_fp8_rowwise(two.data(), q.data(), 1, 2, Fp8Layout::E4M3);
  CHECK(std::vector<uint8_t>(q.begin(), q.begin() + 4) ==
        std::vector<uint8_t>{0x77, 0x6F, 0x00, 0x00});
  CHECK(load_float(q.data() + 4) == 0.46875f);
  decode_fp8_rowwise(q.data(), y.data(), 1, 2, Fp8Layout::E4M3);
  CHECK(y[0] == 2.0f);
  CHECK(y[1] == 1.0f);
}

TEST_CASE("fp8 row-wise: NaN and +-inf survive, the scale comes from the finite values",
          "[kernels]") {
  const std::vector<float> x{kNaN, kInf, -kInf, 0.5f};
  std::vector<uint8_t> q(12);
  encode_fp8_rowwise(x.data(), q.data(), 1, 4, Fp8Layout::E5M2);
  CHECK(std::vector<uint8_t>(q.begin(), q.begin() + 4) ==
        std::vector<uint8_t>{0x7F, 0x7E, 0xFE, 0x7B});
  CHECK(load_float(q.data() + 4) == 1.75f);  // 0.875 / 0.5
  std::vector<float> y(4);
  decode_fp8_rowwise(q.data(), y.data(), 1, 4, Fp8Layout::E5M2);
  CHECK(std::isnan(y[0]));
  CHECK(y[1] == kInf);
  CHECK(y[2] == -kInf);
  CHECK(y[3] == 0.5f);
}

TEST_CASE("int8 row-wise: byte layout, rounding, scale and bias", "[kernels]") {
  // row_dim 3 (one padding byte): min -1, range 2, inverse 127.5; 0 maps to 127.5 -> 128 (even).
  const std::vector<float> x{-1.0f, 0.0f, 1.0f, 0.0f, 1.0f, 3.0f};
  std::vector<uint8_t> q(24, 0xAA);
  encode_int8_rowwise(x.data(), q.data(), 2, 3);
  CHECK(std::vector<uint8_t>(q.begin(), q.begin() + 4) ==
        std::vector<uint8_t>{0, 128, 255, 0});
  CHECK(load_float(q.data() + 4) == 2.0f / 255.0f);
  CHECK(load_float(q.data() + 8) == -1.0f);
  // Row 2: min 0, range 3, inverse 85: 1 -> 85, 3 -> 255.
  CHECK(std::vector<uint8_t>(q.begin() + 12, q.begin() + 16) ==
        std::vector<uint8_t>{0, 85, 255, 0});
  CHECK(load_float(q.data() + 16) == 3.0f / 255.0f);
  CHECK(load_float(q.data() + 20) == 0.0f);
  std::vector<float> y(6);
  decode_int8_rowwise(q.data(), y.data(), 2, 3);
  const float s1 = 2.0f / 255.0f, s2 = 3.0f / 255.0f;
  CHECK(y == std::vector<float>{-1.0f, 128 * s1 - 1.0f, 255 * s1 - 1.0f, 0.0f, 85 * s2, 255 * s2});
  CHECK(y[1] == Approx(1.0f / 255.0f).margin(1e-6));  // 0 comes back half a step high
  // A constant row: range 0, every code 0, value = bias.
  const std::vector<float> c{4.5f, 4.5f, 4.5f, 4.5f};
  std::vector<uint8_t> qc(12);
  encode_int8_rowwise(c.data(), qc.data(), 1, 4);
  CHECK(std::vector<uint8_t>(qc.begin(), qc.begin() + 4) == std::vector<uint8_t>{0, 0, 0, 0});
  decode_int8_rowwise(qc.data(), y.data(), 1, 4);
  CHECK(std::vector<float>(y.begin(), y.begin() + 4) == c);
}

TEST_CASE("int8 row-wise: a row holding NaN or inf decodes to NaN, other rows intact",
          "[kernels]") {
  const std::vector<float> x{1.0f, kNaN, 2.0f, 0.0f, 1.0f, 2.0f, kInf, 3.0f};
  std::vector<uint8_t> q(static_cast<size_t>(3 * rowwise_row_bytes(3)));
  const std::vector<float> rows{x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], 4.0f};
  encode_int8_rowwise(rows.data(), q.data(), 3, 3);
  std::vector<float> y(9);
  decode_int8_rowwise(q.data(), y.data(), 3, 3);
  for (int i : {0, 1, 2, 6, 7, 8}) CHECK(std::isnan(y[static_cast<size_t>(i)]));
  CHECK(y[3] == 0.0f);
  CHECK(y[4] == 128 * (2.0f / 255.0f));
  CHECK(y[5] == 255 * (2.0f / 255.0f));
}

TEST_CASE("vectorised kernels equal element-by-element calls at every tail length", "[kernels]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (size_t n : {1u, 7u, 15u, 16u, 17u, 63u, 64u, 65u, 1000u}) {
    std::vector<float> x(n);
    for (float& v : x) v = normal(rng);
    std::vector<uint16_t> h(n);
    std::vector<uint8_t> q(n);
    encode_wire16(Wire16::Fp16, x.data(), h.data(), n, 1.0f);
    encode_hfp8(x.data(), q.data(), n);
    for (size_t i = 0; i < n; ++i) {
      REQUIRE(h[i] == enc16(x[i], false));
      REQUIRE(q[i] == enc_hfp8(x[i]));
    }
    encode_wire16(Wire16::Bf16, x.data(), h.data(), n, 1.0f);
    for (size_t i = 0; i < n; ++i) REQUIRE(h[i] == enc16(x[i], true));
    // Row-wise: the codes of one row of n values against lrintf of fbgemm's formula.
    std::vector<uint8_t> whole(static_cast<size_t>(rowwise_row_bytes(static_cast<int64_t>(n))));
    encode_int8_rowwise(x.data(), whole.data(), 1, static_cast<int64_t>(n));
    const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
    const float inverse = 255.0f / ((*hi - *lo) + 1e-20f);
    for (size_t i = 0; i < n; ++i)
      REQUIRE(whole[i] == static_cast<uint8_t>(std::lrintf((x[i] - *lo) * inverse)));
  }
}
