// linear (the fused GEMM + bias + ReLU node): values against the unfused ops, gradcheck with
// and without bias and ReLU including zero sizes, which inputs get gradients, errors.
#include <ferry/autograd/ops.h>
#include "math_reference.h"
#include "op_checks.h"

#include <catch2/catch.hpp>

#include <tuple>
#include <vector>

using namespace ferry;
using namespace ferry::testing;
using Catch::Contains;

namespace {

Variable unfused(const Variable& x, const Variable& w, const Variable& b, Activation act) {
  Variable y = matmul(x, transpose(w));
  if (b.defined()) y = y + b;
  return act == Activation::Relu ? relu(y) : y;
}

}  // namespace

TEST_CASE("linear: the unfused ops' values and gradients, with and without bias and ReLU",
          "[ops]") {
  const Tensor x = random64({5, 3}, 1), w = random64({4, 3}, 2), b = random64({4}, 3);
  for (Activation act : {Activation::None, Activation::Relu}) {
    for (bool with_bias : {true, false}) {
      CAPTURE(act == Activation::Relu, with_bias);
      const Variable bias = with_bias ? Variable(b) : Variable();
      CHECK(allclose(linear(Variable(x), Variable(w), bias, act).value(),
                     unfused(Variable(x), Variable(w), bias, act).value(), 1e-12, 1e-12));
      if (with_bias) {
        check_gradients(single([act](const auto& in) { return linear(in[0], in[1], in[2], act); }),
                        {x, w, b});
      } else {
        check_gradients(
            single([act](const auto& in) { return linear(in[0], in[1], Variable(), act); }),
            {x, w});
      }
    }
  }
  // Zero rows, zero inputs (K = 0: the bias alone), zero outputs.
  for (const auto& [n, k, m] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {0, 3, 2}, {2, 0, 3}, {2, 3, 0}}) {
    CAPTURE(n, k, m);
    check_gradients(single([](const auto& in) { return linear(in[0], in[1], in[2]); }),
                    {random64({n, k}, 4), random64({m, k}, 5), random64({m}, 6)});
  }
}

TEST_CASE("linear: ReLU's gradient is 0 at 0 and only inputs that require grad get one",
          "[ops]") {
  // x w^T + b = 0 exactly for the first output: torch's relu passes no gradient there.
  const Tensor x = from_vector<double>({1, 2}, {1, 2});
  const Tensor w = from_vector<double>({1, 0, 0, 1}, {2, 2});
  const Tensor b = from_vector<double>({-1, 0});
  Variable xv(x, true), wv(w, true), bv(b, false);
  sum(linear(xv, wv, bv, Activation::Relu)).backward();
  CHECK(xv.grad().to_vector<double>() == std::vector<double>{0, 1});
  CHECK(wv.grad().to_vector<double>() == std::vector<double>{0, 0, 1, 2});
  CHECK_FALSE(bv.grad().defined());
}

TEST_CASE("linear: shape and dtype errors name the shapes", "[ops]") {
  const Variable x(random64({2, 3}, 1)), w(random64({4, 3}, 2));
  CHECK_THROWS_WITH(linear(x, Variable(random64({4, 2}, 3)), Variable()),
                    Contains("linear: expected input [N, K] and weight [M, K] but got [2, 3] "
                             "and [4, 2]"));
  CHECK_THROWS_WITH(linear(x, w, Variable(random64({3}, 4))),
                    Contains("expected bias [4] for weight [4, 3] but got [3]"));
  CHECK_THROWS_WITH(linear(x, Variable(random64({4, 3}, 2).to(DType::Float32)), Variable()),
                    Contains("linear"));
}
