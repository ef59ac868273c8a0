// Activations, softmaxes and losses: values, gradcheck, target gradients, errors.
#include <ferry/autograd/ops.h>
#include "math_reference.h"
#include "op_checks.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace ferry;
using namespace ferry::testing;
using Catch::Contains;

namespace {

using UnaryOp = Variable (*)(const Variable&);

struct NamedUnary {
  const char* name;
  UnaryOp op;
  double (*ref)(double);
};

const NamedUnary kUnaryOps[] = {
    {"relu", static_cast<UnaryOp>(relu), [](double x) { return x > 0 ? x : 0.0; }},
    {"sigmoid", static_cast<UnaryOp>(sigmoid), [](double x) { return 1 / (1 + std::exp(-x)); }},
    {"tanh", static_cast<UnaryOp>(tanh), [](double x) { return std::tanh(x); }},
    {"exp", static_cast<UnaryOp>(exp), [](double x) { return std::exp(x); }},
    {"log", static_cast<UnaryOp>(log), [](double x) { return std::log(x); }},
};

}  // namespace

TEST_CASE("elementwise activations: values and gradcheck", "[ops]") {
  for (const NamedUnary& u : kUnaryOps) {
    CAPTURE(u.name);
    // log needs positive inputs; the others see both signs (relu's kink at 0 is never hit).
    const bool positive = std::string(u.name) == "log";
    const Tensor x = random64({3, 4}, 1, positive ? 0.2 : -2.0, 2.0);
    CHECK(allclose(u.op(Variable(x)).value(), ref_map(x, u.ref)));
    for (const Shape& s : {Shape{3, 4}, Shape{}, Shape{0, 2}}) {
      CAPTURE(shape_str(s));
      check_gradients(single([&](const auto& in) { return u.op(in[0]); }),
                      {random64(s, 2, positive ? 0.2 : -2.0, 2.0)});
    }
  }
  // Composed: the chain rule through saved outputs.
  check_gradients(single([](const auto& in) {
                    return log(sigmoid(tanh(in[0])) + exp(relu(in[0])));
                  }),
                  {random64({2, 3}, 3)});
}

TEST_CASE("softmax and log_softmax over rows", "[ops]") {
  const Tensor x = random64({3, 5}, 10, -3, 3);
  const Tensor y = softmax(Variable(x)).value();
  for (int64_t i = 0; i < 3; ++i) {
    double row = 0;
    for (int64_t j = 0; j < 5; ++j) row += y.get_flat(i * 5 + j);
    CHECK(row == Approx(1.0));
  }
  CHECK(allclose(log_softmax(Variable(x)).value(),
                 ref_map(y, [](double v) { return std::log(v); })));
  for (const Shape& s : {Shape{3, 5}, Shape{1, 1}, Shape{0, 4}, Shape{2, 0}}) {
    CAPTURE(shape_str(s));
    check_gradients(single([](const auto& in) { return softmax(in[0]); }), {random64(s, 11)});
    check_gradients(single([](const auto& in) { return log_softmax(in[0]); }), {random64(s, 12)});
  }
  REQUIRE_THROWS_WITH(softmax(Variable(zeros({5}))), Contains("softmax") && Contains("[5]"));
  REQUIRE_THROWS_WITH(log_softmax(Variable(zeros({1, 2, 3}))),
                      Contains("log_softmax") && Contains("[1, 2, 3]"));
}

TEST_CASE("mse_loss: values, both gradients, every reduction", "[ops]") {
  const Tensor x = random64({3, 2}, 20);
  const Tensor t = random64({3, 2}, 21);
  double total = 0;
  for (int64_t i = 0; i < 6; ++i) total += std::pow(x.get_flat(i) - t.get_flat(i), 2);
  CHECK(mse_loss(Variable(x), Variable(t)).value().item() == Approx(total / 6));
  CHECK(mse_loss(Variable(x), Variable(t), Reduction::Sum).value().item() == Approx(total));
  CHECK(mse_loss(Variable(x), Variable(t), Reduction::None).shape() == Shape{3, 2});
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    for (const Shape& s : {Shape{3, 2}, Shape{}, Shape{0, 2}}) {
      CAPTURE(reduction_name(r), shape_str(s));
      check_gradients(single([=](const auto& in) { return mse_loss(in[0], in[1], r); }),
                      {random64(s, 22), random64(s, 23)});
    }
  }
  // The target's gradient is the negated input gradient.
  Variable input(x, true, "input");
  Variable target(t, true, "target");
  backward(mse_loss(input, target));
  CHECK(allclose(target.grad(), ref_map(input.grad(), [](double v) { return -v; })));
  REQUIRE_THROWS_WITH(mse_loss(Variable(zeros({3, 2})), Variable(zeros({2, 3}))),
                      Contains("mse_loss") && Contains("[3, 2]") && Contains("[2, 3]"));
}

TEST_CASE("binary_cross_entropy_with_logits: values, both gradients, every reduction", "[ops]") {
  const Tensor x = random64({2, 3}, 30, -4, 4);
  const Tensor t = random64({2, 3}, 31, 0, 1);
  const Tensor l =
      binary_cross_entropy_with_logits(Variable(x), Variable(t), Reduction::None).value();
  for (int64_t i = 0; i < 6; ++i) {
    const double s = 1 / (1 + std::exp(-x.get_flat(i)));
    const double ti = t.get_flat(i);
    CHECK(l.get_flat(i) == Approx(-(ti * std::log(s) + (1 - ti) * std::log(1 - s))));
  }
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    for (const Shape& s : {Shape{2, 3}, Shape{}, Shape{0, 3}}) {
      CAPTURE(reduction_name(r), shape_str(s));
      check_gradients(single([=](const auto& in) {
                        return binary_cross_entropy_with_logits(in[0], in[1], r);
                      }),
                      {random64(s, 32, -4, 4), random64(s, 33, 0, 1)});
    }
  }
  // d/dt = -x / n for the mean: the loss is linear in the target.
  Variable input(x, false, "input");
  Variable target(t, true, "target");
  backward(binary_cross_entropy_with_logits(input, target));
  CHECK(allclose(target.grad(), ref_map(x, [](double v) { return -v / 6; })));
  CHECK_FALSE(input.grad().defined());
  REQUIRE_THROWS_WITH(binary_cross_entropy_with_logits(Variable(zeros({2})), Variable(zeros({3}))),
                      Contains("binary_cross_entropy_with_logits") && Contains("[2]") &&
                          Contains("[3]"));
}
