// add, sub, mul, div, neg and their operators: values, broadcasting gradients, gradcheck.
#include <ferry/autograd/ops.h>
#include "math_reference.h"
#include "op_checks.h"

#include <catch2/catch.hpp>

using namespace ferry;
using namespace ferry::testing;
using Catch::Contains;

namespace {

using BinaryOp = Variable (*)(const Variable&, const Variable&);

struct NamedOp {
  const char* name;
  BinaryOp op;
};

const NamedOp kBinaryOps[] = {
    {"add", static_cast<BinaryOp>(add)},
    {"sub", static_cast<BinaryOp>(sub)},
    {"mul", static_cast<BinaryOp>(mul)},
    {"div", static_cast<BinaryOp>(div)},
};

}  // namespace

TEST_CASE("binary ops gradcheck for every broadcast rule and zero-size shapes", "[ops]") {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3}, {2, 3}}, {{2, 3, 4}, {4}}, {{4}, {3, 4}}, {{}, {2, 3}}, {{2, 3}, {}},
      {{}, {}},         {{0, 3}, {3}},    {{3}, {0, 3}}, {{0, 3}, {0, 3}}, {{2, 0}, {0}},
  };
  uint64_t seed = 100;
  for (const NamedOp& op : kBinaryOps) {
    for (const auto& [sa, sb] : shapes) {
      CAPTURE(op.name, shape_str(sa), shape_str(sb));
      // Values in [0.5, 2) keep div away from its pole.
      check_gradients(single([&](const std::vector<Variable>& in) { return op.op(in[0], in[1]); }),
                      {random64(sa, seed, 0.5, 2.0), random64(sb, seed + 1, 0.5, 2.0)});
      seed += 2;
    }
  }
}

TEST_CASE("a broadcast bias receives the column sums of the gradient", "[ops]") {
  Variable x(random64({3, 2}, 1), true, "x");
  Variable b(from_vector(std::vector<double>{10, 20}), true, "bias");
  Variable y = x + b;
  CHECK(y.shape() == Shape{3, 2});
  CHECK(y.value().get_flat(5) == x.value().get_flat(5) + 20);
  backward(sum(y));
  CHECK(equal(b.grad(), from_vector(std::vector<double>{3, 3})));
  CHECK(equal(x.grad(), ones({3, 2}, DType::Float64)));
  // A 0-d scalar on the left receives the sum of everything.
  Variable s(full({}, 2.0, DType::Float64), true, "s");
  backward(sum(s * x));
  double total = 0;
  for (int64_t i = 0; i < 6; ++i) total += x.value().get_flat(i);
  CHECK(s.grad().dim() == 0);
  CHECK(s.grad().item() == Approx(total));
}

TEST_CASE("ops with a double: values and gradcheck", "[ops]") {
  const Tensor a = random64({2, 3}, 5, 0.5, 2.0);
  const Variable v(a);
  CHECK(allclose((v + 1.5).value(), ref_map(a, [](double x) { return x + 1.5; })));
  CHECK(allclose((1.5 + v).value(), ref_map(a, [](double x) { return 1.5 + x; })));
  CHECK(allclose((v - 1.5).value(), ref_map(a, [](double x) { return x - 1.5; })));
  CHECK(allclose((1.5 - v).value(), ref_map(a, [](double x) { return 1.5 - x; })));
  CHECK(allclose((v * 3.0).value(), ref_map(a, [](double x) { return x * 3.0; })));
  CHECK(allclose((3.0 * v).value(), ref_map(a, [](double x) { return 3.0 * x; })));
  CHECK(allclose((v / 3.0).value(), ref_map(a, [](double x) { return x / 3.0; })));
  CHECK(allclose((3.0 / v).value(), ref_map(a, [](double x) { return 3.0 / x; })));
  CHECK(allclose((-v).value(), ref_map(a, [](double x) { return -x; })));
  CHECK(allclose((v - v * v / v).value(), zeros({2, 3}, DType::Float64)));
  for (const Shape& shape : {Shape{2, 3}, Shape{}, Shape{0, 4}}) {
    CAPTURE(shape_str(shape));
    const std::vector<Tensor> in{random64(shape, 6, 0.5, 2.0)};
    check_gradients(single([](const auto& x) { return x[0] + 1.5; }), in);
    check_gradients(single([](const auto& x) { return 1.5 + x[0]; }), in);
    check_gradients(single([](const auto& x) { return x[0] - 1.5; }), in);
    check_gradients(single([](const auto& x) { return 1.5 - x[0]; }), in);
    check_gradients(single([](const auto& x) { return x[0] * -3.0; }), in);
    check_gradients(single([](const auto& x) { return -3.0 * x[0]; }), in);
    check_gradients(single([](const auto& x) { return x[0] / 3.0; }), in);
    check_gradients(single([](const auto& x) { return 3.0 / x[0]; }), in);
    check_gradients(single([](const auto& x) { return -x[0]; }), in);
    check_gradients(single([](const auto& x) { return neg(x[0]); }), in);
  }
}

TEST_CASE("a variable used twice accumulates both gradients", "[ops]") {
  // d/dx (x * x + x) = 2x + 1.
  Variable x(random64({4}, 8), true, "x");
  backward(sum(x * x + x));
  CHECK(allclose(x.grad(), ref_map(x.value(), [](double v) { return 2 * v + 1; })));
  check_gradients(single([](const auto& in) { return in[0] * in[0] / (in[0] + 3.0); }),
                  {random64({3, 2}, 9)});
}

TEST_CASE("binary ops name the op and both shapes on a mismatch", "[ops]") {
  const Variable a(zeros({2, 3}), true, "a");
  const Variable b(zeros({3, 2}), true, "b");
  for (const NamedOp& op : kBinaryOps) {
    CAPTURE(op.name);
    REQUIRE_THROWS_WITH(op.op(a, b), Contains(op.name) && Contains("[2, 3]") &&
                                         Contains("[3, 2]"));
    REQUIRE_THROWS_WITH(op.op(a, Variable(zeros({2}))), Contains(op.name) &&
                                                            Contains("[2, 3]") &&
                                                            Contains("[2]"));
    REQUIRE_THROWS_WITH(op.op(a, Variable(zeros({2, 3}, DType::Float64))),
                        Contains(op.name) && Contains("float32") && Contains("float64"));
    REQUIRE_THROWS_WITH(op.op(a, Variable()), Contains(op.name) && Contains("undefined"));
  }
}
