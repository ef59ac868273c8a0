// Optimizers against hand-computed steps of torch's update rules.
#include <ferry/autograd/optimizer.h>

#include <catch2/catch.hpp>

#include <cmath>

using namespace ferry;
using Catch::Matchers::Contains;

namespace {

// Gives the parameter a gradient of `g` everywhere, as a backward would.
void set_gradient(Variable& p, double g) { p.set_grad(full(p.shape(), g, p.dtype())); }

}  // namespace

TEST_CASE("SGD with momentum: two steps by hand") {
  for (DType dt : {DType::Float32, DType::Float64}) {
    Variable p(full({2}, 1.0, dt), true, "p");
    Sgd sgd({p}, SgdOptions{.lr = 0.1, .momentum = 0.9});
    set_gradient(p, 1.0);
    sgd.step();  // b = 1, p = 1 - 0.1
    CHECK(p.value().get_flat(0) == Approx(0.9));
    set_gradient(p, 1.0);
    sgd.step();  // b = 0.9 * 1 + 1 = 1.9, p = 0.9 - 0.19
    CHECK(p.value().get_flat(1) == Approx(0.71));
  }
}

TEST_CASE("SGD: weight decay, dampening, Nesterov") {
  Variable p(full({1}, 2.0, DType::Float64), true);
  Sgd sgd({p}, SgdOptions{.lr = 0.5, .momentum = 0.5, .weight_decay = 0.1, .nesterov = true});
  set_gradient(p, 1.0);
  sgd.step();  // g = 1 + 0.2 = 1.2; b = 1.2; g = 1.2 + 0.5 * 1.2 = 1.8; p = 2 - 0.9
  CHECK(p.value().item() == Approx(1.1));
  set_gradient(p, 1.0);
  sgd.step();  // g = 1 + 0.11 = 1.11; b = 0.6 + 1.11 = 1.71; g = 1.11 + 0.855; p = 1.1 - 0.9825
  CHECK(p.value().item() == Approx(0.1175));

  Variable q(full({1}, 0.0, DType::Float64), true);
  Sgd damped({q}, SgdOptions{.lr = 1.0, .momentum = 0.5, .dampening = 0.5});
  set_gradient(q, 1.0);
  damped.step();  // first step: b = g (no dampening), q = -1
  set_gradient(q, 1.0);
  damped.step();  // b = 0.5 + 0.5 = 1, q = -2
  CHECK(q.value().item() == Approx(-2.0));

  CHECK_THROWS_AS(Sgd({p}, SgdOptions{.momentum = 0.0, .nesterov = true}), InvalidArgument);
}

TEST_CASE("Adagrad: two steps by hand, lr decay") {
  Variable p(full({3}, 1.0, DType::Float64), true);
  Adagrad opt({p}, AdagradOptions{.lr = 0.1});
  set_gradient(p, 1.0);
  opt.step();  // s = 1, p = 1 - 0.1
  CHECK(p.value().get_flat(2) == Approx(0.9));
  set_gradient(p, 1.0);
  opt.step();  // s = 2, p = 0.9 - 0.1 / sqrt(2)
  CHECK(p.value().get_flat(0) == Approx(0.9 - 0.1 / std::sqrt(2.0)));

  Variable q(full({1}, 0.0, DType::Float32), true);
  Adagrad decayed({q}, AdagradOptions{.lr = 1.0, .lr_decay = 1.0, .initial_accumulator_value = 3.0});
  set_gradient(q, 1.0);
  decayed.step();  // s = 4, q = -1 / 2
  set_gradient(q, 1.0);
  decayed.step();  // clr = 1 / 2, s = 5, q = -0.5 - 0.5 / sqrt(5)
  CHECK(q.value().item() == Approx(-0.5 - 0.5 / std::sqrt(5.0)));
}

TEST_CASE("optimizers skip parameters without a gradient, zero_grad clears them") {
  Variable p(full({1}, 1.0, DType::Float64), true);
  Variable q(full({1}, 1.0, DType::Float64), true);
  Sgd sgd({p, q}, SgdOptions{.lr = 1.0});
  set_gradient(p, 1.0);
  const uint64_t q_version = q.value().version();
  sgd.step();
  CHECK(p.value().item() == 0.0);
  CHECK(q.value().item() == 1.0);
  CHECK(q.value().version() == q_version);
  sgd.zero_grad();
  CHECK_FALSE(p.grad().defined());
}

TEST_CASE("optimizers reject what they cannot update") {
  Variable constant(full({1}, 1.0, DType::Float64), false, "frozen");
  CHECK_THROWS_WITH(Sgd({constant}, SgdOptions{}), Contains("'frozen'"));
  CHECK_THROWS_AS(Adagrad({constant}, AdagradOptions{}), InvalidArgument);
}
