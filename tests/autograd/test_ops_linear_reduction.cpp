// matmul, transpose, sum and mean: values, gradcheck including zero-size inputs, errors.
#include "autograd/ops.h"
#include "math_reference.h"
#include "op_checks.h"

#include <catch2/catch.hpp>

#include <cmath>

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
