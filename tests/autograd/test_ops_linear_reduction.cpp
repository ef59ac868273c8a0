// matmul, bmm, transpose (2-D and of two dims), sum and mean: values, gradcheck including zero-size inputs, errors.
#include <ferry/autograd/ops.h>
#include "math_reference.h"
#include "op_checks.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

using namespace ferry;
using namespace ferry::testing;
using Catch::Contains;

TEST_CASE("matmul and transpose", "[ops]") {
  const Tensor a = random64({3, 4}, 1);
  const Tensor b = random64({4, 2}, 2);
  CHECK(allclose(matmul(Variable(a), Variable(b)).value(), ref_matmul(a, b)));
  const Tensor t = transpose(Variable(a)).value();
  REQUIRE(t.shape() == Shape{4, 3});
  CHECK(t.get_flat(1 * 3 + 2) == a.get_flat(2 * 4 + 1));
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 4}, {4, 2}}, {{1, 1}, {1, 1}}, {{0, 3}, {3, 2}}, {{2, 0}, {0, 3}}, {{2, 3}, {3, 0}}};
  for (const auto& [sa, sb] : shapes) {
    CAPTURE(shape_str(sa), shape_str(sb));
    check_gradients(single([](const auto& in) { return matmul(in[0], in[1]); }),
                    {random64(sa, 3), random64(sb, 4)});
  }
  for (const Shape& s : {Shape{3, 4}, Shape{0, 2}}) {
    check_gradients(single([](const auto& in) { return transpose(in[0]); }), {random64(s, 5)});
  }
  // A two-layer chain: gradients flow through both products.
  check_gradients(single([](const auto& in) {
                    return matmul(transpose(in[0]), matmul(in[0], in[1]));
                  }),
                  {random64({3, 2}, 6), random64({2, 2}, 7)});
  REQUIRE_THROWS_WITH(matmul(Variable(zeros({2, 3})), Variable(zeros({2, 3}))),
                      Contains("matmul") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(matmul(Variable(zeros({2, 3})), Variable(zeros({3}))),
                      Contains("matmul") && Contains("[2, 3]") && Contains("[3]"));
  REQUIRE_THROWS_WITH(transpose(Variable(zeros({3}))), Contains("transpose") && Contains("[3]"));
}

TEST_CASE("bmm and transpose of two dims", "[ops]") {
  // bmm equals one matmul per batch entry.
  const Tensor a = random64({3, 2, 4}, 21);
  const Tensor b = random64({3, 4, 5}, 22);
  const Tensor y = bmm(Variable(a), Variable(b)).value();
  REQUIRE(y.shape() == Shape{3, 2, 5});
  for (int64_t i = 0; i < 3; ++i) {
    const Tensor expected = ref_matmul(a.select(i).clone(), b.select(i).clone());
    CHECK(allclose(y.select(i).clone(), expected));
  }
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 2, 4}, {3, 4, 5}}, {{1, 1, 1}, {1, 1, 1}}, {{0, 2, 3}, {0, 3, 2}},
      {{2, 0, 3}, {2, 3, 2}}, {{2, 2, 0}, {2, 0, 3}}};
  for (const auto& [sa, sb] : shapes) {
    CAPTURE(shape_str(sa), shape_str(sb));
    check_gradients(single([](const auto& in) { return bmm(in[0], in[1]); }),
                    {random64(sa, 23), random64(sb, 24)});
  }
  // transpose(x, d0, d1): element [i, j, k] lands at the swapped index.
  const Tensor x = random64({2, 3, 4}, 25);
  const Tensor t12 = transpose(Variable(x), 1, 2).value();
  REQUIRE(t12.shape() == Shape{2, 4, 3});
  const Tensor t02 = transpose(Variable(x), 0, -1).value();
  REQUIRE(t02.shape() == Shape{4, 3, 2});
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      for (int64_t k = 0; k < 4; ++k) {
        const double v = x.get_flat((i * 3 + j) * 4 + k);
        CHECK(t12.get_flat((i * 4 + k) * 3 + j) == v);
        CHECK(t02.get_flat((k * 3 + j) * 2 + i) == v);
      }
    }
  }
  CHECK(equal(transpose(Variable(x), 1, 1).value(), x));
  for (const auto& [s, d0, d1] : std::vector<std::tuple<Shape, int64_t, int64_t>>{
           {{2, 3, 4}, 1, 2}, {{2, 3, 4}, 0, 2}, {{5, 2}, 0, 1}, {{2, 0, 3}, 0, 2}}) {
    CAPTURE(shape_str(s), d0, d1);
    check_gradients(single([d0 = d0, d1 = d1](const auto& in) { return transpose(in[0], d0, d1); }),
                    {random64(s, 26)});
  }
  // The Gram matrices of a batch (what DLRM's interaction computes): X X^T through both paths.
  check_gradients(single([](const auto& in) { return bmm(in[0], transpose(in[0], 1, 2)); }),
                  {random64({2, 3, 4}, 27)});
  REQUIRE_THROWS_WITH(bmm(Variable(zeros({2, 3, 4})), Variable(zeros({3, 4, 5}))),
                      Contains("bmm") && Contains("[2, 3, 4]") && Contains("[3, 4, 5]"));
  REQUIRE_THROWS_WITH(bmm(Variable(zeros({2, 3, 4})), Variable(zeros({2, 3, 5}))),
                      Contains("bmm") && Contains("[2, 3, 5]"));
  REQUIRE_THROWS_WITH(bmm(Variable(zeros({3, 4})), Variable(zeros({4, 5}))),
                      Contains("bmm") && Contains("[3, 4]"));
  REQUIRE_THROWS_WITH(transpose(Variable(zeros({2, 3})), 0, 2), Contains("transpose"));
}

TEST_CASE("sum and mean over everything", "[ops]") {
  const Tensor a = random64({2, 3}, 10);
  double total = 0;
  for (int64_t i = 0; i < 6; ++i) total += a.get_flat(i);
  CHECK(sum(Variable(a)).value().item() == Approx(total));
  CHECK(mean(Variable(a)).value().item() == Approx(total / 6));
  CHECK(mean(Variable(a)).dim() == 0);
  for (const Shape& s : {Shape{2, 3}, Shape{}, Shape{5}, Shape{0, 3}}) {
    CAPTURE(shape_str(s));
    check_gradients(single([](const auto& in) { return sum(in[0]); }), {random64(s, 11)});
    check_gradients(single([](const auto& in) { return mean(in[0]); }), {random64(s, 12)});
  }
  // Mean's gradient is 1/n per element.
  Variable x(random64({4, 5}, 13), true, "x");
  backward(mean(x));
  CHECK(allclose(x.grad(), full({4, 5}, 1.0 / 20, DType::Float64)));
}

TEST_CASE("sum and mean along a dim", "[ops]") {
  const Tensor a = random64({2, 3, 4}, 20);
  for (int64_t dim : {0, 1, 2, -1}) {
    for (bool keepdim : {false, true}) {
      CAPTURE(dim, keepdim);
      const int64_t d = dim < 0 ? dim + 3 : dim;
      CHECK(allclose(sum(Variable(a), dim, keepdim).value(), ref_sum_dim(a, d, keepdim)));
      check_gradients(single([=](const auto& in) { return sum(in[0], dim, keepdim); }), {a});
      check_gradients(single([=](const auto& in) { return mean(in[0], dim, keepdim); }), {a});
    }
  }
  for (int64_t dim : {0, 1}) {
    CAPTURE(dim);
    check_gradients(single([=](const auto& in) { return sum(in[0], dim); }),
                    {random64({0, 3}, 21)});
    check_gradients(single([=](const auto& in) { return mean(in[0], dim, true); }),
                    {random64({0, 3}, 22)});
  }
  check_gradients(single([](const auto& in) { return mean(in[0], -1); }), {random64({}, 23)});
  // An empty dim gives NaN means (0 / 0), as torch.
  CHECK(std::isnan(mean(Variable(zeros({2, 0})), 1).value().get_flat(0)));
  REQUIRE_THROWS_WITH(sum(Variable(zeros({2, 3})), 2), Contains("sum") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(mean(Variable(zeros({2, 3})), -3), Contains("mean") && Contains("[2, 3]"));
}
