// The contract every differentiable op shares: dtypes, float32, no-grad mode, gradients only
// for inputs that want them, and saved tensors modified in place.
#include <ferry/autograd/grad_mode.h>
#include <ferry/autograd/ops.h>
#include "math_reference.h"

#include <catch2/catch.hpp>

#include <functional>
#include <string>

using namespace ferry;
using namespace ferry::testing;
using Catch::Contains;

namespace {

// One op applied to two operands (the second is ignored by unary ops).
struct OpCase {
  std::string name;
  std::function<std::vector<Variable>(const Variable&, const Variable&)> run;
  Shape a;
  Shape b;
  bool uses_b = false;
};

std::vector<Variable> one(Variable v) { return {std::move(v)}; }

std::vector<OpCase> all_ops() {
  using V = const Variable&;
  const Tensor idx = int64s({1, 0});
  return {
      {"add", [](V a, V b) { return one(a + b); }, {2, 3}, {3}, true},
      {"sub", [](V a, V b) { return one(a - b); }, {2, 3}, {2, 3}, true},
      {"mul", [](V a, V b) { return one(a * b); }, {2, 3}, {}, true},
      {"div", [](V a, V b) { return one(a / b); }, {2, 3}, {2, 3}, true},
      {"add", [](V a, V) { return one(a + 1.0); }, {2, 3}, {}},
      {"sub", [](V a, V) { return one(1.0 - a); }, {2, 3}, {}},
      {"mul", [](V a, V) { return one(a * 2.0); }, {2, 3}, {}},
      {"div", [](V a, V) { return one(2.0 / a); }, {2, 3}, {}},
      {"neg", [](V a, V) { return one(-a); }, {2, 3}, {}},
      {"matmul", [](V a, V b) { return one(matmul(a, b)); }, {2, 3}, {3, 2}, true},
      {"transpose", [](V a, V) { return one(transpose(a)); }, {2, 3}, {}},
      {"sum", [](V a, V) { return one(sum(a)); }, {2, 3}, {}},
      {"sum", [](V a, V) { return one(sum(a, 1, true)); }, {2, 3}, {}},
      {"mean", [](V a, V) { return one(mean(a)); }, {2, 3}, {}},
      {"mean", [](V a, V) { return one(mean(a, 0)); }, {2, 3}, {}},
      {"reshape", [](V a, V) { return one(reshape(a, {3, 2})); }, {2, 3}, {}},
      {"cat", [](V a, V b) { return one(cat({a, b}, 1)); }, {2, 3}, {2, 1}, true},
      {"split", [](V a, V) { return split(a, 1); }, {2, 3}, {}},
      {"split", [](V a, V) { return split(a, {1, 2}, 1); }, {2, 3}, {}},
      {"chunk", [](V a, V) { return chunk(a, 2, 1); }, {2, 3}, {}},
      {"narrow", [](V a, V) { return one(narrow(a, 1, 1, 2)); }, {2, 3}, {}},
      {"index_select", [idx](V a, V) { return one(index_select(a, 0, idx)); }, {2, 3}, {}},
      {"embedding_bag",
       [idx](V a, V b) {
         return one(embedding_bag(a, idx, int64s({0}), EmbeddingBagMode::Sum, b));
       },
       {2, 3}, {2}, true},
      {"relu", [](V a, V) { return one(relu(a)); }, {2, 3}, {}},
      {"sigmoid", [](V a, V) { return one(sigmoid(a)); }, {2, 3}, {}},
      {"tanh", [](V a, V) { return one(tanh(a)); }, {2, 3}, {}},
      {"exp", [](V a, V) { return one(exp(a)); }, {2, 3}, {}},
      {"log", [](V a, V) { return one(log(a)); }, {2, 3}, {}},
      {"softmax", [](V a, V) { return one(softmax(a)); }, {2, 3}, {}},
      {"log_softmax", [](V a, V) { return one(log_softmax(a)); }, {2, 3}, {}},
      {"mse_loss", [](V a, V b) { return one(mse_loss(a, b)); }, {2, 3}, {2, 3}, true},
      {"binary_cross_entropy_with_logits",
       [](V a, V b) { return one(binary_cross_entropy_with_logits(a, b)); }, {2, 3}, {2, 3},
       true},
  };
}

// Positive operands keep log and div defined.
Variable operand(const Shape& shape, DType dtype, uint64_t seed, bool requires_grad,
                 const char* name) {
  return Variable(uniform(shape, 0.5, 2.0, seed, dtype), requires_grad, name);
}

Variable total(const std::vector<Variable>& outputs) {
  Variable acc = sum(outputs[0]);
  for (size_t k = 1; k < outputs.size(); ++k) acc = acc + sum(outputs[k]);
  return acc;
}

}  // namespace

TEST_CASE("every op rejects integer dtypes naming itself", "[ops][contract]") {
  for (const OpCase& c : all_ops()) {
    CAPTURE(c.name);
    const Variable a(zeros(c.a, DType::Int32));
    const Variable b(zeros(c.b, DType::Int32));
    REQUIRE_THROWS_AS(c.run(a, b), InvalidArgument);
    REQUIRE_THROWS_WITH(c.run(a, b), Contains(c.name + ": dtype int32 is not supported "
                                                       "(float32 or float64)"));
  }
}

TEST_CASE("every op runs forward and backward in float32", "[ops][contract]") {
  for (const OpCase& c : all_ops()) {
    CAPTURE(c.name);
    const Variable a32 = operand(c.a, DType::Float32, 1, true, "a");
    const Variable b32 = operand(c.b, DType::Float32, 2, c.uses_b, "b");
    const std::vector<Variable> y32 = c.run(a32, b32);
    const std::vector<Variable> y64 = c.run(Variable(a32.value().to(DType::Float64)),
                                            Variable(b32.value().to(DType::Float64)));
    REQUIRE(y32.size() == y64.size());
    for (size_t k = 0; k < y32.size(); ++k) {
      CHECK(y32[k].dtype() == DType::Float32);
      CHECK(y32[k].requires_grad());
      CHECK(allclose(y32[k].value(), y64[k].value().to(DType::Float32), 1e-5, 1e-6));
    }
    backward(total(y32));
    REQUIRE(a32.grad().defined());
    CHECK(a32.grad().dtype() == DType::Float32);
    CHECK(a32.grad().shape() == c.a);
    if (c.uses_b) CHECK(b32.grad().dtype() == DType::Float32);
  }
}

TEST_CASE("ops record nothing without grad mode or inputs that require grad", "[ops][contract]") {
  for (const OpCase& c : all_ops()) {
    CAPTURE(c.name);
    const Variable a = operand(c.a, DType::Float64, 3, true, "a");
    const Variable b = operand(c.b, DType::Float64, 4, true, "b");
    {
      NoGradGuard no_grad;
      for (const Variable& y : c.run(a, b)) {
        CHECK(y.is_leaf());
        CHECK_FALSE(y.requires_grad());
      }
    }
    for (const Variable& y : c.run(a.detach(), b.detach())) CHECK_FALSE(y.requires_grad());
  }
}

TEST_CASE("only inputs that require grad receive one", "[ops][contract]") {
  for (const OpCase& c : all_ops()) {
    if (!c.uses_b) continue;
    CAPTURE(c.name);
    for (bool a_wants : {true, false}) {
      const Variable a = operand(c.a, DType::Float64, 5, a_wants, "a");
      const Variable b = operand(c.b, DType::Float64, 6, !a_wants, "b");
      backward(total(c.run(a, b)));
      CHECK(a.grad().defined() == a_wants);
      CHECK(b.grad().defined() == !a_wants);
    }
  }
}

TEST_CASE("a saved tensor modified in place makes backward name it", "[ops][contract]") {
  SECTION("an input of mul") {
    Variable x(random64({2, 2}, 1), true, "x");
    Variable w(random64({2, 2}, 2), true, "weight");
    Variable y = sum(x * w);
    Tensor(w.value()).fill_(3.0);  // a handle to the same storage; bumps its version
    REQUIRE_THROWS_AS(backward(y), InvalidArgument);
  }
  SECTION("the message names the op and the variable") {
    Variable x(random64({2, 2}, 1), true, "x");
    Variable w(random64({2, 2}, 2), true, "weight");
    Variable y = sum(matmul(x, w));
    Tensor(w.value()).set_flat(0, 1.0);
    REQUIRE_THROWS_WITH(backward(y), Contains("matmul") && Contains("weight") &&
                                         Contains("modified in place"));
  }
  SECTION("an op's own saved output") {
    Variable x(random64({3}, 3), true, "x");
    Variable y = exp(x);
    Variable loss = sum(y);
    Tensor(y.value()).fill_(0.0);
    REQUIRE_THROWS_WITH(backward(loss), Contains("exp") && Contains("output of exp"));
  }
  SECTION("a nameless input made by another op, alive or dropped") {
    Variable x(random64({2, 2}, 1), true, "x");
    Variable w(random64({2, 2}, 2), true, "weight");
    Variable e = exp(w);  // saved by matmul below, named after the op that made it
    Variable y = sum(matmul(x, e));
    Tensor shared = e.value();
    shared.set_flat(0, 1.0);
    REQUIRE_THROWS_WITH(backward(y, {}, true), Contains("matmul") && Contains("output 0 of exp"));
    e = Variable();  // the handle gone, the saved tensor still names what it was
    REQUIRE_THROWS_WITH(backward(y), Contains("matmul") && Contains("a variable of shape [2, 2]") &&
                                         Contains("dropped since it was saved"));
  }
  SECTION("the indices of index_select") {
    Variable x(random64({3, 2}, 4), true, "x");
    Tensor idx = int64s({2, 0});
    Variable loss = sum(index_select(x, 0, idx));
    idx.set_flat(0, 1);
    REQUIRE_THROWS_WITH(backward(loss), Contains("index_select") && Contains("indices"));
  }
  SECTION("a tensor the backward does not need may change") {
    // mul's gradient for x reads w only, so x is not saved when w does not require grad.
    Variable x(random64({2, 2}, 5), true, "x");
    Variable w(random64({2, 2}, 6), false, "weight");
    Variable y = sum(x * w);
    Tensor(x.value()).fill_(0.0);
    backward(y);
    CHECK(equal(x.grad(), w.value()));
  }
}
