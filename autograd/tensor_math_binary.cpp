// Elementwise arithmetic: tensor-tensor with ferry's three broadcast rules, tensor-double, neg.
#include <ferry/autograd/tensor_math.h>
#include <ferry/autograd/tensor_math_detail.h>

namespace ferry::kernels {

namespace {

using detail::ArrayRM;
using detail::as_rows;

// How one operand is read when both are viewed as a rows x cols result.
enum class Role { Full, Row, Scalar };

struct Layout {
  Shape shape;
  int64_t rows = 1;
  int64_t cols = 1;
  Role a = Role::Full;
  Role b = Role::Full;
};

// Only the bias-over-rows pattern is accepted beyond equal shapes and scalars: general
// broadcasting would also accept shapes that only match by accident ([3, 1] against [1, 3]).
bool is_row_bias(const Shape& bias, const Shape& full) {
  return bias.size() == 1 && full.size() >= 2 && full.back() == bias[0];
}

Layout layout_of(const char* op, const Shape& a, const Shape& b) {
  if (a == b) return {a, 1, shape_numel(a), Role::Full, Role::Full};
  if (a.empty()) return {b, 1, shape_numel(b), Role::Scalar, Role::Full};
  if (b.empty()) return {a, 1, shape_numel(a), Role::Full, Role::Scalar};
  if (is_row_bias(a, b) || is_row_bias(b, a)) {
    const bool a_is_bias = a.size() == 1;
    const Shape& full = a_is_bias ? b : a;
    const int64_t cols = full.back();
    // Counted from the leading dims rather than numel / cols, which is 0 / 0 for [..., 0].
    const int64_t rows = shape_numel(Shape(full.begin(), full.end() - 1));
    return {full, rows, cols, a_is_bias ? Role::Row : Role::Full,
            a_is_bias ? Role::Full : Role::Row};
  }
  FERRY_THROW(InvalidArgument, op, ": shapes ", shape_str(a), " and ", shape_str(b),
              " cannot be combined (expected equal shapes, a [M] bias against a [..., M] "
              "tensor, or a 0-d tensor)");
}

template <class T, class K>
void with_operand(const Tensor& t, Role role, const Layout& l, K&& k) {
  switch (role) {
    case Role::Full: k(as_rows<T>(t, l.rows, l.cols)); return;
    case Role::Row: k(as_rows<T>(t, 1, l.cols).replicate(l.rows, 1)); return;
    case Role::Scalar: k(ArrayRM<T>::Constant(l.rows, l.cols, *t.data<T>())); return;
  }
}

template <class F>
Tensor binary(const char* op, const Tensor& a, const Tensor& b, F f) {
  detail::check_same_float(op, a, b);
  const Layout l = layout_of(op, a.shape(), b.shape());
  Tensor out = empty(l.shape, a.dtype());
  detail::visit_float(op, a.dtype(), [&]<class T>() {
    auto o = as_rows<T>(out, l.rows, l.cols);
    with_operand<T>(a, l.a, l, [&](auto&& x) {
      with_operand<T>(b, l.b, l, [&](auto&& y) { o = f(x, y); });
    });
  });
  return out;
}

}  // namespace

Shape broadcast_shape(const char* op, const Shape& a, const Shape& b) {
  return layout_of(op, a, b).shape;
}

Tensor add(const Tensor& a, const Tensor& b) {
  return binary("add", a, b, [](const auto& x, const auto& y) { return x + y; });
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return binary("sub", a, b, [](const auto& x, const auto& y) { return x - y; });
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary("mul", a, b, [](const auto& x, const auto& y) { return x * y; });
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary("div", a, b, [](const auto& x, const auto& y) { return x / y; });
}

Tensor reduce_to_shape(const char* op, const Tensor& grad, const Shape& shape) {
  check_float(op, grad);
  const Shape& from = grad.shape();
  if (from == shape) return grad.clone();
  if (shape.empty()) return sum(grad);
  FERRY_CHECK(is_row_bias(shape, from), InvalidArgument, op, ": cannot reduce a gradient of "
              "shape ", shape_str(from), " to shape ", shape_str(shape));
  const int64_t cols = shape[0];
  const int64_t rows = shape_numel(Shape(from.begin(), from.end() - 1));
  Tensor out = empty(shape, grad.dtype());
  detail::visit_float(op, grad.dtype(), [&]<class T>() {
    as_rows<T>(out, 1, cols) = as_rows<T>(grad, rows, cols).colwise().sum();
  });
  return out;
}

// The double is rounded to the tensor's dtype once, then the arithmetic runs in that dtype
// (what torch does for a Python float and a float32 tensor).
Tensor add(const Tensor& a, double s) {
  return detail::map_elements("add", a, [s]<class T>(const auto& x) {
    return x + static_cast<T>(s);
  });
}
Tensor mul(const Tensor& a, double s) {
  return detail::map_elements("mul", a, [s]<class T>(const auto& x) {
    return x * static_cast<T>(s);
  });
}
Tensor div(const Tensor& a, double s) {
  return detail::map_elements("div", a, [s]<class T>(const auto& x) {
    return x / static_cast<T>(s);
  });
}
Tensor scalar_sub(double s, const Tensor& a) {
  return detail::map_elements("sub", a, [s]<class T>(const auto& x) {
    return static_cast<T>(s) - x;
  });
}
Tensor scalar_div(double s, const Tensor& a) {
  return detail::map_elements("div", a, [s]<class T>(const auto& x) {
    return static_cast<T>(s) / x;
  });
}
Tensor neg(const Tensor& a) {
  return detail::map_elements("neg", a, []<class T>(const auto& x) {
    return -x;
  });
}

}  // namespace ferry::kernels
