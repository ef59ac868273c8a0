// The tape: recording, reverse order, accumulation, retain_graph, hooks, saved-tensor versions,
// multi-output functions, forced collective nodes. Only custom Functions are used here, so
// these tests do not depend on the built-in ops.
#include <ferry/autograd/function.h>
#include <ferry/autograd/grad_mode.h>
#include <ferry/autograd/node.h>
#include <ferry/autograd/variable.h>

#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

using namespace ferry;
using Catch::Matchers::Contains;

namespace {

Tensor scaled(const Tensor& t, double s) {
  Tensor out = t.clone();
  out.vec<double>() *= s;
  return out;
}

Tensor product(const Tensor& a, const Tensor& b) {
  Tensor out = a.clone();
  out.vec<double>().array() *= b.vec<double>().array();
  return out;
}

// y = a * b elementwise; logs its id into `log` when its backward runs.
class Mul : public Function {
 public:
  explicit Mul(std::vector<int>* log = nullptr, int id = 0) : log_(log), id_(id) {}
  std::string name() const override { return "mul"; }
  std::vector<Tensor> forward(Context& ctx, const std::vector<Tensor>& in) override {
    ctx.save_for_backward({in[0], in[1]});
    return {product(in[0], in[1])};
  }
  std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& g) override {
    if (log_) log_->push_back(id_);
    auto saved = ctx.saved();
    std::vector<Tensor> grads(2);
    if (ctx.needs_input_grad(0)) grads[0] = product(g[0], saved[1]);
    if (ctx.needs_input_grad(1)) grads[1] = product(g[0], saved[0]);
    return grads;
  }

 private:
  std::vector<int>* log_;
  int id_;
};

// y = s * x, with s kept as a context attribute; logs like Mul.
class Scale : public Function {
 public:
  Scale(double s, std::vector<int>* log = nullptr, int id = 0) : s_(s), log_(log), id_(id) {}
  std::string name() const override { return "scale"; }
  std::vector<Tensor> forward(Context& ctx, const std::vector<Tensor>& in) override {
    ctx.set("s", s_);
    return {scaled(in[0], s_)};
  }
  std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& g) override {
    if (log_) log_->push_back(id_);
    return {scaled(g[0], ctx.get<double>("s"))};
  }

 private:
  double s_;
  std::vector<int>* log_;
  int id_;
};

// Two outputs: (2x, 3x). Records the gradients backward receives.
class Two : public Function {
 public:
  explicit Two(bool materialize = true) : materialize_(materialize) {}
  std::string name() const override { return "two"; }
  std::vector<Tensor> forward(Context& ctx, const std::vector<Tensor>& in) override {
    ctx.set_materialize_grads(materialize_);
    return {scaled(in[0], 2), scaled(in[0], 3)};
  }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) override {
    received = g;
    Tensor dx = zeros(shape_, DType::Float64);
    if (g[0].defined()) dx.vec<double>() += 2 * g[0].vec<double>();
    if (g[1].defined()) dx.vec<double>() += 3 * g[1].vec<double>();
    return {dx};
  }
  Shape shape_ = {3};
  std::vector<Tensor> received;

 private:
  bool materialize_;
};

Variable sum_all(const Variable& x);  // defined below with a Function

class SumAll : public Function {
 public:
  std::string name() const override { return "sum_all"; }
  std::vector<Tensor> forward(Context& ctx, const std::vector<Tensor>& in) override {
    ctx.set("shape", in[0].shape());
    return {full({}, in[0].vec<double>().sum(), DType::Float64)};
  }
  std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& g) override {
    return {full(ctx.get<Shape>("shape"), g[0].item(), DType::Float64)};
  }
};

Variable sum_all(const Variable& x) { return apply(std::make_shared<SumAll>(), {x})[0]; }
Variable mul(const Variable& a, const Variable& b, std::vector<int>* log = nullptr, int id = 0) {
  return apply(std::make_shared<Mul>(log, id), {a, b})[0];
}
Variable scale(const Variable& x, double s, std::vector<int>* log = nullptr, int id = 0) {
  return apply(std::make_shared<Scale>(s, log, id), {x})[0];
}

Tensor vec3(double a, double b, double c) { return from_vector<double>({a, b, c}); }

}  // namespace

TEST_CASE("leaves, detach, names") {
  Variable x(vec3(1, 2, 3), true, "x");
  CHECK(x.is_leaf());
  CHECK(x.requires_grad());
  CHECK(x.describe() == "variable 'x'");
  Variable d = x.detach();
  CHECK(d.is_leaf());
  CHECK_FALSE(d.requires_grad());
  CHECK(d.value().shares_storage_with(x.value()));
  Variable y = scale(x, 2.0);
  CHECK_FALSE(y.is_leaf());
  CHECK(y.requires_grad());
  CHECK(y.describe() == "output 0 of scale");
  CHECK_THROWS_AS(y.set_requires_grad(false), InvalidArgument);
  CHECK_THROWS_AS(Variable(arange(3, DType::Int32), true), InvalidArgument);
  CHECK_FALSE(Variable().defined());
  CHECK_THROWS_WITH(Variable().value(), Contains("undefined"));
}

TEST_CASE("a custom function: gradients, needs_input_grad, accumulation") {
  Variable a(vec3(1, 2, 3), true, "a");
  Variable b(vec3(4, 5, 6), false, "b");
  Variable y = sum_all(mul(a, b));
  CHECK(y.value().item() == 32.0);
  y.backward();
  CHECK(equal(a.grad(), vec3(4, 5, 6)));
  CHECK_FALSE(b.grad().defined());  // b does not require grad: it receives none

  // A second forward + backward accumulates into a.grad.
  sum_all(scale(a, 10.0)).backward();
  CHECK(equal(a.grad(), vec3(14, 15, 16)));
  a.zero_grad();
  CHECK_FALSE(a.grad().defined());

  // The same leaf used twice in one graph: both paths add up.
  sum_all(mul(a, a)).backward();
  CHECK(equal(a.grad(), vec3(2, 4, 6)));
}

TEST_CASE("needs_input_grad on a call that records nothing: false, and still range-checked") {
  // Such a call keeps no list of flags; the context answers from its input count alone.
  class Probe : public Function {
   public:
    std::string name() const override { return "probe"; }
    std::vector<Tensor> forward(Context& ctx, const std::vector<Tensor>& in) override {
      num_inputs = ctx.num_inputs();
      for (size_t i = 0; i < ctx.num_inputs(); ++i) needs.push_back(ctx.needs_input_grad(i));
      CHECK_THROWS_AS(ctx.needs_input_grad(ctx.num_inputs()), InvalidArgument);
      return {in[0].clone()};
    }
    std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) override {
      return {g[0], Tensor()};
    }
    size_t num_inputs = 0;
    std::vector<bool> needs;
  };
  Variable a(vec3(1, 2, 3), true, "a");
  Variable b(vec3(4, 5, 6), false, "b");
  auto unrecorded = std::make_shared<Probe>();
  {
    NoGradGuard no_grad;
    Variable y = apply(unrecorded, {a, b})[0];
    CHECK_FALSE(y.requires_grad());
  }
  CHECK(unrecorded->num_inputs == 2);
  CHECK(unrecorded->needs == std::vector<bool>{false, false});
  auto recorded = std::make_shared<Probe>();
  CHECK(apply(recorded, {a, b})[0].requires_grad());
  CHECK(recorded->needs == std::vector<bool>{true, false});
}

TEST_CASE("accumulating into a gradient never writes through an aliased tensor") {
  // Identity-like backwards hand the same tensor to two leaves; the second accumulation must
  // not change the other leaf's gradient.
  class Fork : public Function {
   public:
    std::string name() const override { return "fork"; }
    std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override {
      Tensor out = in[0].clone();
      out.vec<double>() += in[1].vec<double>();
      return {out};
    }
    std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) override {
      return {g[0], g[0]};  // the very same tensor for both inputs
    }
  };
  Variable p(vec3(0, 0, 0), true, "p");
  Variable q(vec3(0, 0, 0), true, "q");
  sum_all(apply(std::make_shared<Fork>(), {p, q})[0]).backward();
  // grad() is the user's to modify in place (an in-place all_reduce, clipping): never shared.
  CHECK_FALSE(p.grad().shares_storage_with(q.grad()));
  sum_all(scale(p, 5.0)).backward();
  CHECK(equal(p.grad(), vec3(6, 6, 6)));
  CHECK(equal(q.grad(), vec3(1, 1, 1)));
}

TEST_CASE("backward runs nodes in exact reverse recording order") {
  std::vector<int> log;
  Variable x(vec3(1, 2, 3), true, "x");
  // Two branches interleaved: recording order 1, 2, 3, 4, 5.
  Variable a = scale(x, 2, &log, 1);
  Variable b = scale(x, 3, &log, 2);
  Variable c = scale(a, 4, &log, 3);
  Variable d = scale(b, 5, &log, 4);
  Variable e = mul(c, d, &log, 5);
  sum_all(e).backward();
  CHECK(log == std::vector<int>{5, 4, 3, 2, 1});
}

TEST_CASE("retain_graph and a second backward") {
  Variable x(vec3(1, 2, 3), true, "x");
  Variable loss = sum_all(mul(x, x));
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss.backward();
  CHECK(equal(x.grad(), vec3(4, 8, 12)));
  CHECK_THROWS_WITH(loss.backward(), Contains("retain_graph"));
  CHECK_THROWS_AS(loss.backward(), InvalidArgument);
}

TEST_CASE("no-grad guard records nothing") {
  Variable x(vec3(1, 2, 3), true);
  {
    NoGradGuard guard;
    CHECK_FALSE(grad_enabled());
    Variable y = scale(x, 2.0);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_leaf());
    {
      EnableGradGuard again;
      CHECK(scale(x, 2.0).requires_grad());
    }
    CHECK_FALSE(grad_enabled());
  }
  CHECK(grad_enabled());
}

TEST_CASE("several outputs: unused ones get zeros, or nothing when materialisation is off") {
  for (bool materialize : {true, false}) {
    Variable x(vec3(1, 2, 3), true);
    auto fn = std::make_shared<Two>(materialize);
    auto outs = apply(fn, {x});
    REQUIRE(outs.size() == 2);
    sum_all(outs[1]).backward();  // output 0 unused
    REQUIRE(fn->received.size() == 2);
    if (materialize) {
      REQUIRE(fn->received[0].defined());
      CHECK(equal(fn->received[0], zeros({3}, DType::Float64)));
    } else {
      CHECK_FALSE(fn->received[0].defined());
    }
    CHECK(equal(x.grad(), vec3(3, 3, 3)));
  }
}

TEST_CASE("outputs marked non-differentiable do not require grad") {
  class WithCount : public Function {
   public:
    std::string name() const override { return "with_count"; }
    std::vector<Tensor> forward(Context& ctx, const std::vector<Tensor>& in) override {
      ctx.mark_non_differentiable(1);
      return {in[0].clone(), full({}, 3.0, DType::Float64), full({}, 3.0, DType::Int64)};
    }
    std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) override {
      return {g[0]};
    }
  };
  Variable x(vec3(1, 2, 3), true);
  auto outs = apply(std::make_shared<WithCount>(), {x});
  CHECK(outs[0].requires_grad());
  CHECK_FALSE(outs[1].requires_grad());
  CHECK_FALSE(outs[2].requires_grad());  // integer outputs never do
}

TEST_CASE("hooks: replace a gradient, observe a non-leaf, after accumulation") {
  Variable x(vec3(1, 2, 3), true, "x");
  Variable w(vec3(1, 1, 1), true, "w");
  std::vector<std::string> events;
  x.register_hook([&](const Tensor& g) {
    events.push_back("x");
    return scaled(g, 2.0);
  });
  x.register_post_accumulate_hook([&](Variable& leaf) {
    events.push_back("x accumulated");
    CHECK(leaf.grad().defined());
  });
  w.register_post_accumulate_hook([&](Variable&) { events.push_back("w accumulated"); });
  Variable h = scale(x, 3.0);
  Tensor seen;
  h.register_hook([&](const Tensor& g) {
    seen = g;
    events.push_back("h");
    return Tensor();
  });
  h.retain_grad();
  Variable y = sum_all(mul(h, w));
  y.backward();
  CHECK(equal(seen, vec3(1, 1, 1)));
  CHECK(equal(h.grad(), vec3(1, 1, 1)));
  CHECK(equal(x.grad(), vec3(6, 6, 6)));  // 3 * 1, doubled by the hook
  CHECK(equal(w.grad(), vec3(3, 6, 9)));
  // w's last use (mul) runs before scale, so w is complete first.
  CHECK(events == std::vector<std::string>{"w accumulated", "h", "x", "x accumulated"});
  // A hook returning the wrong shape is an error.
  Variable z(vec3(1, 2, 3), true, "z");
  z.register_hook([](const Tensor&) { return zeros({2}, DType::Float64); });
  CHECK_THROWS_AS(sum_all(z).backward(), InvalidArgument);
}

TEST_CASE("modifying a saved tensor in place raises at backward, naming the variable") {
  Variable a(vec3(1, 2, 3), true, "weights");
  Variable b(vec3(4, 5, 6), true, "b");
  Variable y = sum_all(mul(a, b));
  Tensor v = a.value();
  v.vec<double>()[0] = 7;  // through an Eigen map: the writer must bump the version
  v.bump_version();
  CHECK_THROWS_WITH(y.backward(), Contains("'weights'") && Contains("modified in place"));
  Variable c(vec3(1, 2, 3), true);
  Variable y2 = sum_all(mul(c, b));
  Tensor cv = c.value();
  cv.fill_(1.0);
  CHECK_THROWS_WITH(y2.backward(), Contains("input 0 of mul"));
}

TEST_CASE("bad roots and bad gradients") {
  Variable x(vec3(1, 2, 3), true, "x");
  Variable y = scale(x, 2.0);
  CHECK_THROWS_WITH(y.backward(), Contains("3 elements"));
  CHECK_THROWS_WITH(y.backward(zeros({2}, DType::Float64)), Contains("[3]") && Contains("[2]"));
  y.backward(ones({3}, DType::Float64));
  CHECK(equal(x.grad(), vec3(2, 2, 2)));
  Variable c(vec3(1, 2, 3), false, "constant");
  CHECK_THROWS_WITH(c.backward(), Contains("does not require grad"));

  class WrongShape : public Function {
   public:
    std::string name() const override { return "wrong_shape"; }
    std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override {
      return {in[0].clone()};
    }
    std::vector<Tensor> backward(Context&, const std::vector<Tensor>&) override {
      return {ones({1}, DType::Float64)};  // torch would broadcast-sum this silently
    }
  };
  Variable bad = sum_all(apply(std::make_shared<WrongShape>(), {x})[0]);
  CHECK_THROWS_WITH(bad.backward(), Contains("wrong_shape") && Contains("[1]") &&
                                        Contains("[3]"));
}

namespace {

// Scale, as a node that communicates in backward.
class Collective : public Scale {
 public:
  using Scale::Scale;
  std::string name() const override { return "fake_collective"; }
  bool is_collective() const override { return true; }
};

}  // namespace

TEST_CASE("a collective node runs in backward even when the root does not depend on it") {
  std::vector<int> log;
  Variable x(vec3(1, 2, 3), true, "x");
  Variable unused = apply(std::make_shared<Collective>(2.0, &log, 7), {x})[0];
  Variable loss = sum_all(scale(x, 1.0, &log, 8));
  loss.backward();
  CHECK(log == std::vector<int>{8, 7});  // reverse order, the collective with zero gradient
  CHECK(equal(x.grad(), vec3(1, 1, 1)));

  // A collective of a forward that an earlier backward consumed is not forced again.
  Variable unused2 = apply(std::make_shared<Collective>(2.0, &log, 9), {x})[0];
  sum_all(x).backward();  // consumes the forward containing node 9: it runs here
  log.clear();
  sum_all(scale(x, 1.0, &log, 10)).backward();
  CHECK(log == std::vector<int>{10});
}

TEST_CASE("a kept collective node runs in the next backward though no variable holds it") {
  std::vector<int> log;
  Variable x(vec3(1, 2, 3), true, "x");
  std::weak_ptr<detail::Node> kept;
  {
    Variable out = apply(std::make_shared<Collective>(2.0, &log, 7), {x})[0];
    kept = out.impl()->producer;
    detail::keep_until_backward(out.impl()->producer);
  }  // the only variable holding the node is gone
  REQUIRE_FALSE(kept.expired());
  sum_all(scale(x, 1.0, &log, 8)).backward();
  CHECK(log == std::vector<int>{8, 7});
  CHECK(kept.expired());  // released once it ran

  // One recorded after the roots is passed by: released without running.
  Variable loss = sum_all(scale(x, 1.0, &log, 9));
  {
    Variable out = apply(std::make_shared<Collective>(2.0, &log, 10), {x})[0];
    kept = out.impl()->producer;
    detail::keep_until_backward(out.impl()->producer);
  }
  log.clear();
  loss.backward();
  CHECK(log == std::vector<int>{9});
  CHECK(kept.expired());
}

TEST_CASE("a long chain is freed without recursion") {
  Variable x(vec3(1, 2, 3), true);
  Variable y = x;
  for (int i = 0; i < 200000; ++i) y = scale(y, 1.0);
  y = Variable();  // frees 200000 nodes
  SUCCEED("no stack overflow");
  Variable z = x;
  for (int i = 0; i < 1000; ++i) z = scale(z, 1.0);
  sum_all(z).backward();
  CHECK(equal(x.grad(), vec3(1, 1, 1)));
}

TEST_CASE("context attributes of the wrong type or name are errors") {
  class Bad : public Function {
   public:
    std::string name() const override { return "bad_attr"; }
    std::vector<Tensor> forward(Context& ctx, const std::vector<Tensor>& in) override {
      ctx.set("k", 3);
      return {in[0].clone()};
    }
    std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& g) override {
      (void)ctx.get<double>("k");
      return {g[0]};
    }
  };
  Variable x(vec3(1, 2, 3), true);
  CHECK_THROWS_WITH(sum_all(apply(std::make_shared<Bad>(), {x})[0]).backward(),
                    Contains("bad_attr") && Contains("'k'"));
}
