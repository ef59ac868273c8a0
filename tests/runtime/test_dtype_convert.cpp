// DType names and sizes, and the rounding / saturation rules of Tensor::to and copy_.
#include <ferry/runtime/tensor.h>
#include <ferry/runtime/tensor_detail.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace ferry;

namespace {

uint16_t bits(half h) { return std::bit_cast<uint16_t>(h); }
uint16_t bits(bfloat16 b) { return std::bit_cast<uint16_t>(b); }

// Every non-negative finite value of a 16-bit float type, ascending, plus the value at which
// the format overflows (2^16 for half, 2^128 for bfloat16) standing for +inf: IEEE rounds to
// infinity exactly when the nearest-even choice against that value picks it.
template <class T>
struct Reference16 {
  std::vector<double> values;
  std::vector<uint16_t> patterns;

  Reference16() {
    for (uint32_t b = 0; b < 0x8000; ++b) {
      const T x = std::bit_cast<T>(static_cast<uint16_t>(b));
      const double v = static_cast<double>(static_cast<float>(x));
      if (!std::isfinite(v)) break;  // patterns ascend in value up to the first inf
      values.push_back(v);
      patterns.push_back(static_cast<uint16_t>(b));
    }
    const uint16_t inf = patterns.back() + 1;
    const double top = values.back();
    const double step = top - values[values.size() - 2];
    values.push_back(top + step);
    patterns.push_back(inf);
  }

  // Round-to-nearest-even of |d| computed by bracketing: the midpoint of two neighbours of an
  // 8- or 11-bit format is exact in double, so the comparisons are exact.
  uint16_t round(double d) const {
    const uint16_t sign = std::signbit(d) ? 0x8000 : 0;
    const double a = std::fabs(d);
    if (a >= values.back()) return sign | patterns.back();
    const auto hi = static_cast<size_t>(std::upper_bound(values.begin(), values.end(), a) -
                                        values.begin());
    const size_t lo = hi - 1;
    if (values[lo] == a) return sign | patterns[lo];
    const double mid = values[lo] + (values[hi] - values[lo]) / 2;
    size_t pick = a < mid ? lo : a > mid ? hi : ((patterns[lo] & 1) == 0 ? lo : hi);
    return sign | patterns[pick];
  }
};

}  // namespace

TEST_CASE("dtype sizes, names and parsing", "[dtype]") {
  CHECK(dtype_size(DType::Float32) == 4);
  CHECK(dtype_size(DType::Float64) == 8);
  CHECK(dtype_size(DType::Float16) == 2);
  CHECK(dtype_size(DType::BFloat16) == 2);
  CHECK(dtype_size(DType::Int32) == 4);
  CHECK(dtype_size(DType::Int64) == 8);
  CHECK(dtype_size(DType::UInt8) == 1);
  CHECK(std::string(dtype_name(DType::Float32)) == "float32");
  CHECK(std::string(dtype_name(DType::BFloat16)) == "bfloat16");
  CHECK(std::string(dtype_name(DType::UInt8)) == "uint8");
  for (DType t : kAllDTypes) CHECK(dtype_from_name(dtype_name(t)) == t);

  CHECK(dtype_from_name("f32") == DType::Float32);
  CHECK(dtype_from_name("float") == DType::Float32);
  CHECK(dtype_from_name("f64") == DType::Float64);
  CHECK(dtype_from_name("double") == DType::Float64);
  CHECK(dtype_from_name("f16") == DType::Float16);
  CHECK(dtype_from_name("fp16") == DType::Float16);
  CHECK(dtype_from_name("half") == DType::Float16);
  CHECK(dtype_from_name("bf16") == DType::BFloat16);
  CHECK(dtype_from_name("i32") == DType::Int32);
  CHECK(dtype_from_name("int") == DType::Int32);
  CHECK(dtype_from_name("i64") == DType::Int64);
  CHECK(dtype_from_name("long") == DType::Int64);
  CHECK(dtype_from_name("u8") == DType::UInt8);

  REQUIRE_THROWS_AS(dtype_from_name("float8"), InvalidArgument);
  REQUIRE_THROWS_AS(dtype_from_name(""), InvalidArgument);
  REQUIRE_THROWS_WITH(dtype_from_name("complex64"),
                      Catch::Contains("complex64") && Catch::Contains("float32") &&
                          Catch::Contains("bf16"));

  CHECK(is_floating(DType::Float16));
  CHECK(is_floating(DType::BFloat16));
  CHECK(is_floating(DType::Float64));
  CHECK_FALSE(is_floating(DType::Int64));
  CHECK_FALSE(is_floating(DType::UInt8));
}

TEST_CASE("float to half and bfloat16 round to nearest even", "[convert]") {
  const float tie_down = 1.0f + std::ldexp(1.0f, -11);     // halfway 1 | 1+2^-10: even is 1
  const float tie_up = 1.0f + 3 * std::ldexp(1.0f, -11);   // halfway 1+2^-10 | 1+2^-9
  const float above = tie_down + std::ldexp(1.0f, -20);    // just past the halfway point
  Tensor h = from_vector<float>({tie_down, tie_up, above, -tie_up}).to(DType::Float16);
  const std::vector<half> hv = h.to_vector<half>();
  CHECK(bits(hv[0]) == 0x3C00);  // 1.0
  CHECK(bits(hv[1]) == 0x3C02);  // 1 + 2^-9
  CHECK(bits(hv[2]) == 0x3C01);  // 1 + 2^-10
  CHECK(bits(hv[3]) == 0xBC02);
  CHECK(h.get_flat(1) == 1.0 + std::ldexp(1.0, -9));

  const float b_tie_down = 1.0f + std::ldexp(1.0f, -8);
  const float b_tie_up = 1.0f + 3 * std::ldexp(1.0f, -8);
  const float b_above = b_tie_down + std::ldexp(1.0f, -20);
  Tensor b = from_vector<float>({b_tie_down, b_tie_up, b_above}).to(DType::BFloat16);
  const std::vector<bfloat16> bv = b.to_vector<bfloat16>();
  CHECK(bits(bv[0]) == 0x3F80);  // 1.0
  CHECK(bits(bv[1]) == 0x3F82);  // 1 + 2^-6
  CHECK(bits(bv[2]) == 0x3F81);  // 1 + 2^-7

  // Overflow: 65520 is halfway between 65504 and the (even) overflow value, so it becomes inf.
  Tensor big = from_vector<float>({65504.0f, 65519.0f, 65520.0f, 1e6f}).to(DType::Float16);
  CHECK(big.get_flat(0) == 65504.0);
  CHECK(big.get_flat(1) == 65504.0);
  CHECK(std::isinf(big.get_flat(2)));
  CHECK(std::isinf(big.get_flat(3)));
}

TEST_CASE("double to half and bfloat16 round once, not through float", "[convert]") {
  // 1 + 2^-11 + 2^-40 is above the halfway point, so it rounds up to 1 + 2^-10. Converting to
  // float first loses the 2^-40 and leaves an exact tie, which rounds down to 1.
  const double d = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  CHECK(bits(half(static_cast<float>(d))) == 0x3C00);  // the double rounding this avoids
  CHECK(bits(detail::double_to_half(d)) == 0x3C01);
  CHECK(bits(from_vector<double>({d}).to(DType::Float16).to_vector<half>()[0]) == 0x3C01);

  // Just below the overflow threshold: float rounds up to 65520 (a tie that overflows).
  const double near_max = 65519.99999999;
  CHECK(std::isinf(static_cast<float>(half(static_cast<float>(near_max)))));
  CHECK(from_vector<double>({near_max}).to(DType::Float16).item() == 65504.0);

  const double db = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  CHECK(bits(bfloat16(static_cast<float>(db))) == 0x3F80);
  CHECK(bits(detail::double_to_bfloat16(db)) == 0x3F81);
  CHECK(bits(from_vector<double>({-db}).to(DType::BFloat16).to_vector<bfloat16>()[0]) == 0xBF81);
}

TEST_CASE("integers to bfloat16 round once", "[convert]") {
  // 2^30 + 2^22 + 1: bfloat16 keeps 2^30..2^23, the rest (2^22 + 1) is above half an ulp.
  // Through float, the +1 is dropped first and the tie rounds down to 2^30.
  const int64_t v = (int64_t{1} << 30) + (int64_t{1} << 22) + 1;
  CHECK(bits(bfloat16(static_cast<float>(v))) == 0x4E80);
  CHECK(bits(detail::int64_to_bfloat16(v)) == 0x4E81);
  CHECK(from_vector<int64_t>({v}).to(DType::BFloat16).item() == std::ldexp(1.0, 30) + std::ldexp(1.0, 23));
  CHECK(from_vector<int32_t>({static_cast<int32_t>(v)}).to(DType::BFloat16).item() ==
        std::ldexp(1.0, 30) + std::ldexp(1.0, 23));
  // Above 2^53, where int64 -> double also rounds.
  const int64_t w = (int64_t{1} << 62) + (int64_t{1} << 54) + 1;
  CHECK(from_vector<int64_t>({w, -w}).to(DType::BFloat16).to_vector<bfloat16>()[1] ==
        bfloat16(-(std::ldexp(1.0f, 62) + std::ldexp(1.0f, 55))));
  CHECK(from_vector<int64_t>({std::numeric_limits<int64_t>::min()}).to(DType::BFloat16).item() ==
        -std::ldexp(1.0, 63));
}

TEST_CASE("round-to-odd narrowing", "[convert]") {
  CHECK(detail::double_to_float_odd(1.0) == 1.0f);
  CHECK(detail::double_to_float_odd(1.0 + std::ldexp(1.0, -30)) == 1.0f + std::ldexp(1.0f, -23));
  CHECK(detail::double_to_float_odd(-(1.0 + std::ldexp(1.0, -30))) ==
        -(1.0f + std::ldexp(1.0f, -23)));
  // 1 + 2^-22 + 2^-30 is inexact and 1 + 2^-22 is even: the odd neighbour is above.
  CHECK(detail::double_to_float_odd(1.0 + std::ldexp(1.0, -22) + std::ldexp(1.0, -30)) ==
        1.0f + 3 * std::ldexp(1.0f, -23));
  CHECK(detail::double_to_float_odd(1e300) == std::numeric_limits<float>::max());
  CHECK(detail::double_to_float_odd(1e-300) == std::numeric_limits<float>::denorm_min());
  CHECK(std::isinf(detail::double_to_float_odd(-std::numeric_limits<double>::infinity())));
  CHECK(std::isnan(detail::double_to_float_odd(std::nan(""))));
  CHECK(detail::int64_to_float_odd((int64_t{1} << 40) + 1) ==
        std::ldexp(1.0f, 40) + std::ldexp(1.0f, 40 - 23));
  CHECK(detail::int64_to_float_odd(-(int64_t{1} << 40)) == -std::ldexp(1.0f, 40));
}

TEST_CASE("double to 16-bit floats matches a bracketing reference", "[convert]") {
  const Reference16<half> ref_h;
  const Reference16<bfloat16> ref_b;
  std::mt19937_64 gen(7);
  std::vector<double> samples;
  for (int i = 0; i < 20000; ++i) {
    const auto& ref = (i % 2 == 0) ? ref_h.values : ref_b.values;
    const size_t k = gen() % (ref.size() - 1);
    const double lo = ref[k];
    const double gap = ref[k + 1] - lo;
    // Exact midpoints, hair-breadth either side of them, and arbitrary points in between.
    const double offsets[] = {0.5, 0.5 + 0x1p-40, 0.5 - 0x1p-40,
                              static_cast<double>(gen() >> 11) * 0x1p-53};
    for (double o : offsets) samples.push_back((gen() & 1 ? -1 : 1) * (lo + gap * o));
  }
  const Tensor src = from_vector(samples);
  const std::vector<half> hs = src.to(DType::Float16).to_vector<half>();
  const std::vector<bfloat16> bs = src.to(DType::BFloat16).to_vector<bfloat16>();
  size_t wrong_h = 0, wrong_b = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    wrong_h += bits(hs[i]) != ref_h.round(samples[i]);
    wrong_b += bits(bs[i]) != ref_b.round(samples[i]);
  }
  CHECK(wrong_h == 0);
  CHECK(wrong_b == 0);
}

TEST_CASE("float to integer truncates and saturates", "[convert]") {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor f = from_vector<float>({1e10f, -1e10f, std::nanf(""), inf, -inf, 2.9f, -2.9f, -0.5f});
  CHECK(f.to(DType::Int32).to_vector<int32_t>() ==
        std::vector<int32_t>{INT32_MAX, INT32_MIN, 0, INT32_MAX, INT32_MIN, 2, -2, 0});
  CHECK(f.to(DType::UInt8).to_vector<uint8_t>() == std::vector<uint8_t>{255, 0, 0, 255, 0, 2, 0, 0});
  CHECK(f.to(DType::Int64).to_vector<int64_t>() ==
        std::vector<int64_t>{10000000000, -10000000000, 0, INT64_MAX, INT64_MIN, 2, -2, 0});

  const Tensor d = from_vector<double>({9.3e18, -9.3e18, 9.2e18, -9223372036854775808.0, 255.99, 256.0});
  CHECK(d.to(DType::Int64).to_vector<int64_t>() ==
        std::vector<int64_t>{INT64_MAX, INT64_MIN, 9200000000000000000, INT64_MIN, 255, 256});
  CHECK(d.to(DType::UInt8).to_vector<uint8_t>() == std::vector<uint8_t>{255, 0, 255, 0, 255, 255});
  CHECK(from_vector<double>({2147483647.9, 2147483648.0, -2147483648.9})
            .to(DType::Int32)
            .to_vector<int32_t>() == std::vector<int32_t>{INT32_MAX, INT32_MAX, INT32_MIN});

  CHECK(from_vector<half>({half(-inf), half(300.0f)}).to(DType::Int32).to_vector<int32_t>() ==
        std::vector<int32_t>{INT32_MIN, 300});
  CHECK(from_vector<bfloat16>({bfloat16(3e20f)}).to(DType::Int64).to_vector<int64_t>()[0] == INT64_MAX);
}

TEST_CASE("integer narrowing saturates", "[convert]") {
  CHECK(from_vector<int64_t>({INT64_MAX, INT64_MIN, -7}).to(DType::Int32).to_vector<int32_t>() ==
        std::vector<int32_t>{INT32_MAX, INT32_MIN, -7});
  CHECK(from_vector<int32_t>({-1, 256, 255}).to(DType::UInt8).to_vector<uint8_t>() ==
        std::vector<uint8_t>{0, 255, 255});
  CHECK(from_vector<uint8_t>({255}).to(DType::Int64).to_vector<int64_t>()[0] == 255);
  CHECK(from_vector<int64_t>({INT64_MAX}).to(DType::Float64).item() == 0x1p63);
}

TEST_CASE("conversions round trip exactly", "[convert]") {
  std::vector<uint16_t> all16;
  for (uint32_t b = 0; b < 0x10000; ++b) all16.push_back(static_cast<uint16_t>(b));

  // Every non-NaN half survives float32 and float64 and comes back with identical bits.
  std::vector<half> hs;
  for (uint16_t b : all16) {
    const half h = std::bit_cast<half>(b);
    if (!std::isnan(static_cast<float>(h))) hs.push_back(h);
  }
  const Tensor th = from_vector(hs);
  CHECK(equal(th.to(DType::Float32).to(DType::Float16), th));
  CHECK(equal(th.to(DType::Float64).to(DType::Float16), th));
  CHECK(th.to(DType::Float64).to(DType::Float16).to_vector<half>().size() == hs.size());
  const std::vector<half> back = th.to(DType::Float64).to(DType::Float16).to_vector<half>();
  CHECK(std::equal(back.begin(), back.end(), hs.begin(),
                   [](half a, half b) { return bits(a) == bits(b); }));  // keeps -0

  std::vector<bfloat16> bs;
  for (uint16_t b : all16) {
    const bfloat16 x = std::bit_cast<bfloat16>(b);
    if (!std::isnan(static_cast<float>(x))) bs.push_back(x);
  }
  const Tensor tb = from_vector(bs);
  CHECK(equal(tb.to(DType::Float32).to(DType::BFloat16), tb));
  CHECK(equal(tb.to(DType::Float64).to(DType::BFloat16), tb));

  std::vector<uint8_t> bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<uint8_t>(i));
  const Tensor tu = from_vector(bytes);
  for (DType t : kAllDTypes) CHECK(equal(tu.to(t).to(DType::UInt8), tu));

  const Tensor ti = from_vector<int32_t>({INT32_MIN, -1, 0, 1, INT32_MAX});
  CHECK(equal(ti.to(DType::Float64).to(DType::Int32), ti));
  CHECK(equal(ti.to(DType::Int64).to(DType::Int32), ti));

  const Tensor tf = uniform({1000}, -1e6, 1e6, 3, DType::Float32);
  CHECK(equal(tf.to(DType::Float64).to(DType::Float32), tf));

  // to() always copies, even to the same dtype.
  const Tensor same = tf.to(DType::Float32);
  CHECK_FALSE(same.shares_storage_with(tf));
  CHECK(equal(same, tf));
}

TEST_CASE("copy_, fill_ and set_flat convert like to()", "[convert]") {
  Tensor u = zeros({3}, DType::UInt8);
  u.fill_(-1);
  CHECK(u.to_vector<uint8_t>() == std::vector<uint8_t>{0, 0, 0});
  u.fill_(300.5);
  CHECK(u.to_vector<uint8_t>() == std::vector<uint8_t>{255, 255, 255});
  u.set_flat(1, 7.9);
  CHECK(u.to_vector<uint8_t>() == std::vector<uint8_t>{255, 7, 255});

  Tensor h = zeros({2}, DType::Float16);
  h.fill_(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40));
  CHECK(bits(h.to_vector<half>()[0]) == 0x3C01);

  Tensor dst = zeros({2, 2}, DType::Int32);
  dst.copy_(from_vector<double>({1.5, -2.5, 1e12, std::nan("")}));  // shapes differ, numel agrees
  CHECK(dst.to_vector<int32_t>() == std::vector<int32_t>{1, -2, INT32_MAX, 0});
  REQUIRE_THROWS_AS(dst.copy_(zeros({5})), InvalidArgument);
  REQUIRE_THROWS_WITH(dst.copy_(zeros({5})), Catch::Contains("Tensor::copy_") &&
                                                 Catch::Contains("5") && Catch::Contains("4"));
  REQUIRE_THROWS_AS(dst.copy_(Tensor()), InvalidArgument);

  // Overlapping views of one storage copy as if through a temporary (memmove).
  Tensor r = arange(6, DType::Int64);
  r.narrow(0, 0, 4).copy_(r.narrow(0, 2, 4));
  CHECK(r.to_vector<int64_t>() == std::vector<int64_t>{2, 3, 4, 5, 4, 5});
  Tensor s = arange(6, DType::Int64);
  s.narrow(0, 2, 4).copy_(s.narrow(0, 0, 4));
  CHECK(s.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 0, 1, 2, 3});
}

// Float to and from the 16-bit floats runs over whole buffers in loops of its own (vectorised,
// F16C for half where the build targets it): each element must come out with the bits Eigen's
// scalar conversion gives it, NaNs, ties, subnormals and infinities included, for lengths that
// leave a tail after the 8-wide steps.
TEST_CASE("whole-buffer 16-bit conversions give the scalar conversion's bits", "[convert]") {
  // Every 16-bit pattern widened, NaNs included.
  std::vector<uint16_t> all16(0x10000);
  for (uint32_t b = 0; b < 0x10000; ++b) all16[b] = static_cast<uint16_t>(b);
  auto widened = [&](DType from) {
    Tensor t = empty({0x10000}, from);
    std::memcpy(t.raw_data(), all16.data(), all16.size() * 2);
    return t.to(DType::Float32).to_vector<float>();
  };
  const std::vector<float> from_half = widened(DType::Float16);
  const std::vector<float> from_bf16 = widened(DType::BFloat16);
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float h = static_cast<float>(std::bit_cast<half>(static_cast<uint16_t>(b)));
    const float f = static_cast<float>(std::bit_cast<bfloat16>(static_cast<uint16_t>(b)));
    if (std::bit_cast<uint32_t>(from_half[b]) != std::bit_cast<uint32_t>(h))
      FAIL("half " << b << " widened to bits " << std::bit_cast<uint32_t>(from_half[b]));
    if (std::bit_cast<uint32_t>(from_bf16[b]) != std::bit_cast<uint32_t>(f))
      FAIL("bfloat16 " << b << " widened to bits " << std::bit_cast<uint32_t>(from_bf16[b]));
  }

  // Floats: every pattern whose low 13 bits are one of a few (so every exponent, sign and high
  // mantissa, with exact ties, just-below and just-above ties), plus random patterns.
  std::vector<uint32_t> patterns;
  for (uint32_t high = 0; high < (1u << 19); ++high)
    for (uint32_t low : {0x0000u, 0x0001u, 0x0FFFu, 0x1000u, 0x1001u, 0x1FFFu})
      patterns.push_back(high << 13 | low);
  std::mt19937 gen(7);
  for (int i = 0; i < 200001; ++i) patterns.push_back(static_cast<uint32_t>(gen()));
  const int64_t n = static_cast<int64_t>(patterns.size());  // not a multiple of 8
  REQUIRE(n % 8 != 0);
  Tensor floats = empty({n}, DType::Float32);
  std::memcpy(floats.raw_data(), patterns.data(), patterns.size() * 4);
  const std::vector<half> to_half = floats.to(DType::Float16).to_vector<half>();
  const std::vector<bfloat16> to_bf16 = floats.to(DType::BFloat16).to_vector<bfloat16>();
  for (int64_t i = 0; i < n; ++i) {
    const float f = std::bit_cast<float>(patterns[static_cast<size_t>(i)]);
    if (bits(to_half[static_cast<size_t>(i)]) != bits(half(f)))
      FAIL("float bits " << patterns[static_cast<size_t>(i)] << " to half: "
                         << bits(to_half[static_cast<size_t>(i)]) << ", scalar " << bits(half(f)));
    if (bits(to_bf16[static_cast<size_t>(i)]) != bits(bfloat16(f)))
      FAIL("float bits " << patterns[static_cast<size_t>(i)] << " to bfloat16: "
                         << bits(to_bf16[static_cast<size_t>(i)]) << ", scalar "
                         << bits(bfloat16(f)));
  }
  SUCCEED("every element matched");
}
