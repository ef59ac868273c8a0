// Elementwise activations, softmax / log_softmax over rows, and their backward helpers.
#include <ferry/autograd/tensor_math.h>
#include <ferry/autograd/tensor_math_detail.h>

namespace ferry::kernels {

namespace {

using detail::ArrayCol;
using detail::as_rows;
using detail::flat;

// grad (elementwise) f(grad, z) for z the saved input or output of the same shape.
template <class F>
Tensor elementwise_backward(const char* op, const Tensor& grad, const Tensor& z, F f) {
  detail::check_same_shape(op, grad, z, "the gradient", "the saved tensor");
  Tensor out = empty(z.shape(), z.dtype());
  detail::visit_float(op, z.dtype(), [&]<class T>() {
    flat<T>(out) = f.template operator()<T>(flat<T>(grad), flat<T>(z));
  });
  return out;
}

void check_rows(const char* op, const Tensor& x) {
  check_float(op, x);
  FERRY_CHECK(x.dim() == 2, InvalidArgument, op, ": expected a 2-D tensor [N, M] (reduced over "
              "the last dim) but got shape ", shape_str(x.shape()));
}

// Applies f(in, out) to x and a fresh tensor of its shape, both as [N, M] arrays; an empty x
// has no row to reduce (and no row maximum), so f is not called.
template <class F>
Tensor row_kernel(const char* op, const Tensor& x, F f) {
  check_rows(op, x);
  Tensor out = empty(x.shape(), x.dtype());
  if (x.numel() == 0) return out;
  detail::visit_float(op, x.dtype(), [&]<class T>() {
    auto in = as_rows<T>(x, x.size(0), x.size(1));
    auto o = as_rows<T>(out, x.size(0), x.size(1));
    f(in, o);
  });
  return out;
}

template <class F>
Tensor row_backward(const char* op, const Tensor& grad, const Tensor& y, F f) {
  check_rows(op, y);
  detail::check_same_shape(op, grad, y, "the gradient", "the saved output");
  Tensor out = empty(y.shape(), y.dtype());
  if (y.numel() == 0) return out;
  detail::visit_float(op, y.dtype(), [&]<class T>() {
    auto g = as_rows<T>(grad, y.size(0), y.size(1));
    auto yy = as_rows<T>(y, y.size(0), y.size(1));
    auto o = as_rows<T>(out, y.size(0), y.size(1));
    f(g, yy, o);
  });
  return out;
}

}  // namespace

Tensor relu(const Tensor& x) {
  // select keeps NaN (NaN < 0 is false), as torch's relu does.
  return detail::map_elements("relu", x, []<class T>(const auto& v) {
    return (v < T(0)).select(T(0), v);
  });
}

Tensor relu_backward(const Tensor& grad, const Tensor& x) {
  return elementwise_backward("relu", grad, x, []<class T>(const auto& g, const auto& v) {
    return (v > T(0)).select(g, T(0));
  });
}

Tensor sigmoid(const Tensor& x) {
  // exp(-x) overflows to inf for very negative x, which gives the correct limit 0.
  return detail::map_elements("sigmoid", x, []<class T>(const auto& v) {
    return T(1) / (T(1) + (-v).exp());
  });
}

Tensor sigmoid_backward(const Tensor& grad, const Tensor& y) {
  return elementwise_backward("sigmoid", grad, y, []<class T>(const auto& g, const auto& v) {
    return g * v * (T(1) - v);
  });
}

Tensor tanh(const Tensor& x) {
  return detail::map_elements("tanh", x, []<class T>(const auto& v) { return v.tanh(); });
}

Tensor tanh_backward(const Tensor& grad, const Tensor& y) {
  return elementwise_backward("tanh", grad, y, []<class T>(const auto& g, const auto& v) {
    return g * (T(1) - v * v);
  });
}

Tensor exp(const Tensor& x) {
  return detail::map_elements("exp", x, []<class T>(const auto& v) { return v.exp(); });
}

Tensor log(const Tensor& x) {
  return detail::map_elements("log", x, []<class T>(const auto& v) { return v.log(); });
}

Tensor softmax(const Tensor& x) {
  return row_kernel("softmax", x, [](const auto& in, auto& o) {
    using T = typename std::decay_t<decltype(in)>::Scalar;
    const ArrayCol<T> max = in.rowwise().maxCoeff();
    o = (in.colwise() - max).exp();
    const ArrayCol<T> total = o.rowwise().sum();
    o.colwise() /= total;
  });
}

Tensor softmax_backward(const Tensor& grad, const Tensor& y) {
  return row_backward("softmax", grad, y, [](const auto& g, const auto& yy, auto& o) {
    using T = typename std::decay_t<decltype(g)>::Scalar;
    const ArrayCol<T> dot = (g * yy).rowwise().sum();
    o = yy * (g.colwise() - dot);
  });
}

Tensor log_softmax(const Tensor& x) {
  return row_kernel("log_softmax", x, [](const auto& in, auto& o) {
    using T = typename std::decay_t<decltype(in)>::Scalar;
    const ArrayCol<T> max = in.rowwise().maxCoeff();
    o = in.colwise() - max;
    const ArrayCol<T> log_total = o.exp().rowwise().sum().log();
    o.colwise() -= log_total;
  });
}

Tensor log_softmax_backward(const Tensor& grad, const Tensor& y) {
  return row_backward("log_softmax", grad, y, [](const auto& g, const auto& yy, auto& o) {
    using T = typename std::decay_t<decltype(g)>::Scalar;
    const ArrayCol<T> total = g.rowwise().sum();
    o = g - yy.exp().colwise() * total;
  });
}

}  // namespace ferry::kernels
