// add, sub, mul, div (variable-variable with broadcasting, and with a double), neg, operators.
#include <ferry/autograd/ops.h>
#include <ferry/autograd/ops_detail.h>

namespace ferry {

namespace {

using Grads = std::vector<Tensor>;
using Needs = std::vector<bool>;

// The gradient of an operand of `shape` from the gradient of the (possibly broadcast) result.
// Passed through without a copy when nothing was broadcast: the engine never writes to a
// gradient it did not allocate.
Tensor reduce_grad(const char* op, const Tensor& g, const Shape& shape) {
  return g.shape() == shape ? g : kernels::reduce_to_shape(op, g, shape);
}

// Records a one-input op whose input gradient is f(grad of the output).
template <class F>
Variable record_unary(const char* op, const Variable& a, Tensor y, F f) {
  if (!detail::should_record({&a})) return Variable(std::move(y));
  return detail::record(op, {&a}, std::move(y),
                        [f](const Grads& g, const Needs&) { return Grads{f(g[0])}; });
}

}  // namespace

Variable add(const Variable& a, const Variable& b) {
  Tensor y = kernels::add(detail::value_of("add", a, "a"), detail::value_of("add", b, "b"));
  if (!detail::should_record({&a, &b})) return Variable(std::move(y));
  return detail::record("add", {&a, &b}, std::move(y),
                        [sa = a.shape(), sb = b.shape()](const Grads& g, const Needs& needs) {
                          return Grads{needs[0] ? reduce_grad("add", g[0], sa) : Tensor(),
                                       needs[1] ? reduce_grad("add", g[0], sb) : Tensor()};
                        });
}

Variable sub(const Variable& a, const Variable& b) {
  Tensor y = kernels::sub(detail::value_of("sub", a, "a"), detail::value_of("sub", b, "b"));
  if (!detail::should_record({&a, &b})) return Variable(std::move(y));
  return detail::record(
      "sub", {&a, &b}, std::move(y),
      [sa = a.shape(), sb = b.shape()](const Grads& g, const Needs& needs) {
        return Grads{needs[0] ? reduce_grad("sub", g[0], sa) : Tensor(),
                     needs[1] ? kernels::neg(reduce_grad("sub", g[0], sb)) : Tensor()};
      });
}

Variable mul(const Variable& a, const Variable& b) {
  Tensor y = kernels::mul(detail::value_of("mul", a, "a"), detail::value_of("mul", b, "b"));
  if (!detail::should_record({&a, &b})) return Variable(std::move(y));
  // Each operand's gradient needs the other operand.
  detail::SavedTensor saved_a = detail::save_if(b.requires_grad(), a);
  detail::SavedTensor saved_b = detail::save_if(a.requires_grad(), b);
  return detail::record(
      "mul", {&a, &b}, std::move(y),
      [saved_a, saved_b, sa = a.shape(), sb = b.shape()](const Grads& g, const Needs& needs) {
        Grads out(2);
        if (needs[0]) out[0] = reduce_grad("mul", kernels::mul(g[0], saved_b.get("mul")), sa);
        if (needs[1]) out[1] = reduce_grad("mul", kernels::mul(g[0], saved_a.get("mul")), sb);
        return out;
      });
}

Variable div(const Variable& a, const Variable& b) {
  Tensor y = kernels::div(detail::value_of("div", a, "a"), detail::value_of("div", b, "b"));
  if (!detail::should_record({&a, &b})) return Variable(std::move(y));
  detail::SavedTensor saved_a = detail::save_if(b.requires_grad(), a);
  detail::SavedTensor saved_b = detail::save(b);  // both gradients divide by b
  return detail::record(
      "div", {&a, &b}, std::move(y),
      [saved_a, saved_b, sa = a.shape(), sb = b.shape()](const Grads& g, const Needs& needs) {
        const Tensor& vb = saved_b.get("div");
        Grads out(2);
        if (needs[0]) out[0] = reduce_grad("div", kernels::div(g[0], vb), sa);
        if (needs[1]) {
          // d(a / b)/db = -a / b^2, as torch computes it: -g * a / (b * b).
          const Tensor num = kernels::mul(g[0], saved_a.get("div"));
          out[1] = reduce_grad("div", kernels::neg(kernels::div(num, kernels::mul(vb, vb))), sb);
        }
        return out;
      });
}

Variable add(const Variable& a, double s) {
  return record_unary("add", a, kernels::add(detail::value_of("add", a, "a"), s),
                      [](const Tensor& g) { return g; });
}
Variable add(double s, const Variable& a) { return add(a, s); }

Variable sub(const Variable& a, double s) {
  // a - s == a + (-s) exactly in IEEE arithmetic.
  return record_unary("sub", a, kernels::add(detail::value_of("sub", a, "a"), -s),
                      [](const Tensor& g) { return g; });
}

Variable sub(double s, const Variable& a) {
  return record_unary("sub", a, kernels::scalar_sub(s, detail::value_of("sub", a, "a")),
                      [](const Tensor& g) { return kernels::neg(g); });
}

Variable mul(const Variable& a, double s) {
  return record_unary("mul", a, kernels::mul(detail::value_of("mul", a, "a"), s),
                      [s](const Tensor& g) { return kernels::mul(g, s); });
}
Variable mul(double s, const Variable& a) { return mul(a, s); }

Variable div(const Variable& a, double s) {
  return record_unary("div", a, kernels::div(detail::value_of("div", a, "a"), s),
                      [s](const Tensor& g) { return kernels::div(g, s); });
}

Variable div(double s, const Variable& a) {
  Tensor y = kernels::scalar_div(s, detail::value_of("div", a, "a"));
  if (!detail::should_record({&a})) return Variable(std::move(y));
  detail::SavedTensor saved_a = detail::save(a);
  return detail::record("div", {&a}, std::move(y), [saved_a, s](const Grads& g, const Needs&) {
    // d(s / a)/da = -s / a^2.
    const Tensor& va = saved_a.get("div");
    return Grads{kernels::neg(kernels::div(kernels::mul(g[0], s), kernels::mul(va, va)))};
  });
}

Variable neg(const Variable& a) {
  return record_unary("neg", a, kernels::neg(detail::value_of("neg", a, "a")),
                      [](const Tensor& g) { return kernels::neg(g); });
}

Variable operator+(const Variable& a, const Variable& b) { return add(a, b); }
Variable operator+(const Variable& a, double s) { return add(a, s); }
Variable operator+(double s, const Variable& a) { return add(s, a); }
Variable operator-(const Variable& a, const Variable& b) { return sub(a, b); }
Variable operator-(const Variable& a, double s) { return sub(a, s); }
Variable operator-(double s, const Variable& a) { return sub(s, a); }
Variable operator*(const Variable& a, const Variable& b) { return mul(a, b); }
Variable operator*(const Variable& a, double s) { return mul(a, s); }
Variable operator*(double s, const Variable& a) { return mul(s, a); }
Variable operator/(const Variable& a, const Variable& b) { return div(a, b); }
Variable operator/(const Variable& a, double s) { return div(a, s); }
Variable operator/(double s, const Variable& a) { return div(s, a); }
Variable operator-(const Variable& a) { return neg(a); }

}  // namespace ferry
