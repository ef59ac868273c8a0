// equal, allclose, shape helpers and printing.
#include <ferry/runtime/tensor.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>
#include <string>

using namespace ferry;

TEST_CASE("shape helpers", "[compare]") {
  CHECK(shape_str({2, 3}) == "[2, 3]");
  CHECK(shape_str({}) == "[]");
  CHECK(shape_str({0}) == "[0]");
  CHECK(shape_numel({2, 3, 4}) == 24);
  CHECK(shape_numel({}) == 1);
  CHECK(shape_numel({5, 0}) == 0);
}

TEST_CASE("equal compares dtype, shape and values", "[compare]") {
  const Tensor a = from_vector<float>({1, 2, 3, 4}, {2, 2});
  CHECK(equal(a, a.clone()));
  CHECK_FALSE(equal(a, a.reshape({4})));
  CHECK_FALSE(equal(a, a.to(DType::Float64)));
  Tensor b = a.clone();
  b.set_flat(3, 4.0001);
  CHECK_FALSE(equal(a, b));
  CHECK(equal(tensor({-0.0}), tensor({0.0})));
  CHECK_FALSE(equal(tensor({NAN}), tensor({NAN})));
  // 2^53 and 2^53 + 1 are the same double but different int64s.
  const int64_t big = int64_t{1} << 53;
  CHECK_FALSE(equal(from_vector<int64_t>({big}), from_vector<int64_t>({big + 1})));
  CHECK(equal(zeros({0, 3}), zeros({0, 3})));
  CHECK_FALSE(equal(zeros({0, 3}), zeros({3, 0})));
  REQUIRE_THROWS_AS(equal(a, Tensor()), InvalidArgument);
}

TEST_CASE("allclose uses atol + rtol * |b|", "[compare]") {
  const Tensor a = tensor({1.0, 100.0, -5.0});
  CHECK(allclose(a, tensor({1.0 + 1e-7, 100.0 + 5e-4, -5.0})));
  CHECK_FALSE(allclose(a, tensor({1.0, 100.0 + 2e-3, -5.0})));
  CHECK(allclose(a, tensor({1.1, 100.0, -5.0}), 0, 0.11));
  CHECK_FALSE(allclose(a, tensor({1.1, 100.0, -5.0}), 0, 0.09));
  CHECK(allclose(a, tensor({1.0, 100.0, -5.0}), 0, 0));
  // Different dtypes compare as float64.
  CHECK(allclose(a.to(DType::Float16), a));
  CHECK(allclose(tensor({1, 100, -5}), a));
  CHECK_FALSE(allclose(tensor({1.0f + 1e-3f}), tensor({1.0f})));
  CHECK(allclose(tensor({INFINITY, -INFINITY}), tensor({INFINITY, -INFINITY})));
  CHECK_FALSE(allclose(tensor({INFINITY}), tensor({-INFINITY})));
  CHECK_FALSE(allclose(tensor({1.0}), tensor({INFINITY})));
  CHECK_FALSE(allclose(tensor({INFINITY}), tensor({1e300})));
  CHECK_FALSE(allclose(tensor({NAN}), tensor({NAN})));
  CHECK_FALSE(allclose(tensor({1.0}), tensor({NAN})));
  REQUIRE_THROWS_AS(allclose(a, a.reshape({3, 1})), InvalidArgument);
  REQUIRE_THROWS_AS(allclose(Tensor(), a), InvalidArgument);
}

TEST_CASE("printing shows values, shape and dtype", "[print]") {
  CHECK(from_vector<float>({1, 2, 3, 4}, {2, 2}).to_string() ==
        "tensor([[1., 2.],\n        [3., 4.]], shape=[2, 2], dtype=float32)");
  CHECK(tensor({1.5f, -3.25f, 0.1f}).to_string() ==
        "tensor([1.5, -3.25, 0.1], shape=[3], dtype=float32)");
  CHECK(full({}, 3.5, DType::Float64).to_string() == "tensor(3.5, shape=[], dtype=float64)");
  CHECK(zeros({0, 3}).to_string() == "tensor([], shape=[0, 3], dtype=float32)");
  CHECK(Tensor().to_string() == "tensor(undefined)");
  CHECK(tensor({1, -2}).to_string() == "tensor([1, -2], shape=[2], dtype=int32)");
  CHECK(from_vector<uint8_t>({255}).to_string() == "tensor([255], shape=[1], dtype=uint8)");
  CHECK(from_vector<int64_t>({(int64_t{1} << 53) + 1}).to_string() ==
        "tensor([9007199254740993], shape=[1], dtype=int64)");
  CHECK(tensor({NAN, INFINITY, -INFINITY}).to_string() ==
        "tensor([nan, inf, -inf], shape=[3], dtype=float32)");
  CHECK(tensor({1.0 / 3}).to_string() == "tensor([0.3333333333], shape=[1], dtype=float64)");
  CHECK(tensor({1.0 / 3}).to(DType::BFloat16).to_string() ==
        "tensor([0.334], shape=[1], dtype=bfloat16)");

  // Higher ranks separate blocks with a blank line, indented under the first bracket.
  CHECK(arange(8, DType::Int64).reshape({2, 2, 2}).to_string() ==
        "tensor([[[0, 1],\n         [2, 3]],\n\n        [[4, 5],\n         [6, 7]]], "
        "shape=[2, 2, 2], dtype=int64)");

  std::ostringstream os;
  os << tensor({2.0, 0.5});
  CHECK(os.str() == "tensor([2., 0.5], shape=[2], dtype=float64)");
}

TEST_CASE("printing elides the middle of large tensors", "[print]") {
  const std::string s = arange(2000, DType::Int32).to_string();
  CHECK(s == "tensor([0, 1, 2, ..., 1997, 1998, 1999], shape=[2000], dtype=int32)");

  const std::string m = arange(4000, DType::Int32).reshape({40, 100}).to_string();
  CHECK(m.find("tensor([[0, 1, 2, ..., 97, 98, 99],") == 0);
  CHECK(m.find("\n        ...,\n        [3700, 3701, 3702, ..., 3797, 3798, 3799]") !=
        std::string::npos);
  CHECK(m.find("[3900, 3901, 3902, ..., 3997, 3998, 3999]]") != std::string::npos);
  CHECK(m.find("1000") == std::string::npos);  // row 10 is elided
  CHECK(m.find("shape=[40, 100], dtype=int32)") != std::string::npos);

  // Small tensors are never elided.
  CHECK(arange(1000, DType::Int32).to_string().find("...") == std::string::npos);
}
