// Factories: constants, ranges, seeded random tensors, from_vector, cat.
#include <ferry/runtime/tensor.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

using namespace ferry;

TEST_CASE("constant factories", "[factories]") {
  for (DType t : kAllDTypes) {
    const Tensor z = zeros({2, 3}, t);
    const Tensor o = ones({2, 3}, t);
    const Tensor f = full({3}, 7, t);
    CHECK(z.dtype() == t);
    CHECK(o.dtype() == t);
    for (int64_t i = 0; i < 6; ++i) {
      CHECK(z.get_flat(i) == 0.0);
      CHECK(o.get_flat(i) == 1.0);
    }
    CHECK(f.get_flat(2) == 7.0);
  }
  CHECK(zeros({3}).dtype() == DType::Float32);
  CHECK(full({2}, -2.75, DType::Float64).to_vector<double>() == std::vector<double>{-2.75, -2.75});
  CHECK(full({2}, -2.75, DType::Int32).to_vector<int32_t>() == std::vector<int32_t>{-2, -2});
  CHECK(full({}, 1e9, DType::Float16).item() == INFINITY);
  CHECK(empty({5}, DType::UInt8).numel() == 5);
}

TEST_CASE("arange", "[factories]") {
  CHECK(arange(5).to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4});
  CHECK(arange(3, DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2});
  CHECK(arange(0).numel() == 0);
  CHECK(arange(0, 1, 0.25, DType::Float64).to_vector<double>() ==
        std::vector<double>{0, 0.25, 0.5, 0.75});
  CHECK(arange(5, 0, -2, DType::Int32).to_vector<int32_t>() == std::vector<int32_t>{5, 3, 1});
  CHECK(arange(1, 2, 0.3, DType::Float64).numel() == 4);  // 1, 1.3, 1.6, 1.9
  CHECK(arange(2, 2, 1).numel() == 0);
  CHECK(arange(-1.5, 1.5, 1.0, DType::Int32).to_vector<int32_t>() ==
        std::vector<int32_t>{-1, 0, 0});  // -1.5, -0.5, 0.5 truncated toward zero
  REQUIRE_THROWS_AS(arange(-1), InvalidArgument);
  REQUIRE_THROWS_AS(arange(0, 1, 0), InvalidArgument);
  REQUIRE_THROWS_AS(arange(0, 1, -1), InvalidArgument);
  REQUIRE_THROWS_AS(arange(0, INFINITY, 1), InvalidArgument);
}

TEST_CASE("uniform is seeded, portable and in range", "[factories][random]") {
  // The first draw of std::mt19937_64 seeded with 42 is 13930160852258120406 (the standard fixes
  // the engine's output); its top 53 bits scaled to [0, 1) are 0.755155532954539..., so in [2, 5)
  // the first value is 2 + 3 * that.
  const Tensor g = uniform({2}, 2, 5, 42, DType::Float64);
  CHECK(g.get_flat(0) == 4.2654665988636165);

  const Tensor a = uniform({20000}, -1, 3, 11, DType::Float32);
  const Tensor b = uniform({20000}, -1, 3, 11, DType::Float32);
  const Tensor c = uniform({20000}, -1, 3, 12, DType::Float32);
  CHECK(equal(a, b));
  CHECK_FALSE(equal(a, c));
  double sum = 0, sum_sq = 0, lo = 1e9, hi = -1e9;
  for (float v : a.to_vector<float>()) {
    sum += v;
    sum_sq += double(v) * v;
    lo = std::min(lo, double(v));
    hi = std::max(hi, double(v));
  }
  const double n = 20000;
  const double mean = sum / n;
  const double var = sum_sq / n - mean * mean;
  CHECK(mean == Approx(1.0).margin(0.05));        // (low + high) / 2
  CHECK(var == Approx(16.0 / 12.0).epsilon(0.05));  // (high - low)^2 / 12
  CHECK(lo >= -1.0);
  CHECK(hi < 3.0);
  CHECK(lo < -0.99);
  CHECK(hi > 2.99);

  // In half precision about 1 draw in 4096 lies within 2^-12 of 1 and rounds to 1.0 itself; the
  // upper bound stays excluded anyway.
  const Tensor h = uniform({100000}, 0, 1, 5, DType::Float16);
  double h_max = 0;
  for (int64_t i = 0; i < h.numel(); ++i) h_max = std::max(h_max, h.get_flat(i));
  CHECK(h_max < 1.0);
  CHECK(h_max == 1.0 - std::ldexp(1.0, -11));

  const Tensor ints = uniform({1000}, 0, 10, 1, DType::Int32);
  int32_t imin = 100, imax = -100;
  for (int32_t v : ints.to_vector<int32_t>()) {
    imin = std::min(imin, v);
    imax = std::max(imax, v);
  }
  CHECK(imin == 0);
  CHECK(imax == 9);
  CHECK(uniform({3}, 4, 4, 1, DType::Float64).to_vector<double>() == std::vector<double>{4, 4, 4});
  REQUIRE_THROWS_AS(uniform({2}, 1, 0, 0), InvalidArgument);
  REQUIRE_THROWS_AS(uniform({2}, 0, NAN, 0), InvalidArgument);
}

TEST_CASE("normal is seeded, portable and has the right moments", "[factories][random]") {
  // Box-Muller on the first two draws for seed 42 (u1 = 1 - 0.755..., u2 = 0.639...), computed
  // independently with a reference implementation of mt19937_64.
  const Tensor g = normal({3}, 0, 1, 42, DType::Float64);
  CHECK(g.get_flat(0) == Approx(-1.0771745442782885).epsilon(1e-14));
  CHECK(g.get_flat(1) == Approx(-1.2860634502166481).epsilon(1e-14));
  CHECK(equal(normal({3}, 0, 1, 42, DType::Float64).narrow(0, 0, 2),
              normal({2}, 0, 1, 42, DType::Float64)));

  const Tensor a = normal({50001}, 3, 2, 9, DType::Float64);
  CHECK(equal(a, normal({50001}, 3, 2, 9, DType::Float64)));
  CHECK_FALSE(equal(a, normal({50001}, 3, 2, 10, DType::Float64)));
  double sum = 0, sum_sq = 0;
  int64_t within_one_sigma = 0;
  for (double v : a.to_vector<double>()) {
    sum += v;
    sum_sq += v * v;
    within_one_sigma += std::fabs(v - 3) < 2;
  }
  const double n = 50001;
  const double mean = sum / n;
  const double var = sum_sq / n - mean * mean;
  CHECK(mean == Approx(3.0).margin(0.05));
  CHECK(var == Approx(4.0).epsilon(0.05));
  CHECK(within_one_sigma / n == Approx(0.6827).margin(0.01));

  CHECK(normal({4}, 1.5, 0, 3).to_vector<float>() == std::vector<float>{1.5, 1.5, 1.5, 1.5});
  CHECK(normal({0}, 0, 1, 3).numel() == 0);
  REQUIRE_THROWS_AS(normal({2}, 0, -1, 0), InvalidArgument);
}

TEST_CASE("from_vector and tensor", "[factories]") {
  const Tensor t = from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  CHECK(t.shape() == Shape{3, 2});
  CHECK(t.at<float>({2, 1}) == 6.0f);
  CHECK(from_vector<uint8_t>({1, 2}).shape() == Shape{2});
  CHECK(from_vector<double>({}).numel() == 0);
  CHECK(from_vector<int64_t>({9}, {}).item() == 9.0);
  const Tensor i = tensor({1, 2, 3});
  CHECK(i.dtype() == DType::Int32);
  CHECK(tensor({1.0, 2.0}).dtype() == DType::Float64);
  CHECK(tensor({bfloat16(1.0f)}).dtype() == DType::BFloat16);
  REQUIRE_THROWS_AS(from_vector<float>({1, 2, 3}, {2, 2}), InvalidArgument);
  REQUIRE_THROWS_WITH(from_vector<float>({1, 2, 3}, {2, 2}),
                      Catch::Contains("from_vector") && Catch::Contains("[2, 2]") &&
                          Catch::Contains("4") && Catch::Contains("3"));
  REQUIRE_THROWS_AS(from_vector<float>({1}, {-1}), InvalidArgument);
}

TEST_CASE("cat along any dim copies", "[factories][cat]") {
  const Tensor a = from_vector<int32_t>({1, 2, 3, 4}, {2, 2});
  const Tensor b = from_vector<int32_t>({5, 6}, {1, 2});
  const Tensor c0 = cat({a, b});
  CHECK(c0.shape() == Shape{3, 2});
  CHECK(c0.to_vector<int32_t>() == std::vector<int32_t>{1, 2, 3, 4, 5, 6});
  CHECK_FALSE(c0.shares_storage_with(a));

  const Tensor d = from_vector<int32_t>({7, 8, 9, 10, 11, 12}, {2, 3});
  const Tensor c1 = cat({a, d}, 1);
  CHECK(c1.shape() == Shape{2, 5});
  CHECK(c1.to_vector<int32_t>() == std::vector<int32_t>{1, 2, 7, 8, 9, 3, 4, 10, 11, 12});
  CHECK(equal(cat({a, d}, -1), c1));

  const Tensor x = arange(12, DType::Float64).reshape({2, 3, 2});
  const Tensor y = full({2, 1, 2}, -1, DType::Float64);
  CHECK(cat({x, y}, 1).to_vector<double>() ==
        std::vector<double>{0, 1, 2, 3, 4, 5, -1, -1, 6, 7, 8, 9, 10, 11, -1, -1});
  CHECK(cat({y, x, y}, 2 - 1).shape() == Shape{2, 5, 2});

  // Empty pieces contribute nothing; the splits of a tensor cat back to the tensor.
  CHECK(equal(cat({zeros({0, 2}, DType::Int32), a, zeros({0, 2}, DType::Int32)}), a));
  CHECK(cat({zeros({0, 2}), zeros({0, 2})}).shape() == Shape{0, 2});
  CHECK(equal(cat(x.split(1)), x));
  CHECK(equal(cat({a}), a));
  CHECK(equal(cat(arange(7).chunk(3)), arange(7)));

  REQUIRE_THROWS_AS(cat({}), InvalidArgument);
  REQUIRE_THROWS_AS(cat({a, Tensor()}), InvalidArgument);
  REQUIRE_THROWS_AS(cat({a, a.to(DType::Int64)}), InvalidArgument);
  REQUIRE_THROWS_WITH(cat({a, a.to(DType::Int64)}), Catch::Contains("int64") &&
                                                        Catch::Contains("int32"));
  REQUIRE_THROWS_AS(cat({a, d}), InvalidArgument);            // dim 1 differs
  REQUIRE_THROWS_WITH(cat({a, d}), Catch::Contains("[2, 3]") && Catch::Contains("[2, 2]"));
  REQUIRE_THROWS_AS(cat({a, b}, 1), InvalidArgument);         // dim 0 differs
  REQUIRE_THROWS_AS(cat({a, arange(4, DType::Int32)}), InvalidArgument);  // rank differs
  REQUIRE_THROWS_AS(cat({a, a}, 2), InvalidArgument);
  REQUIRE_THROWS_AS(cat({full({}, 1), full({}, 2)}), InvalidArgument);
}
