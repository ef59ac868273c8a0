// The fused linear layer: one GEMM plus one pass for bias and activation, and its backward
// with the ReLU mask applied once to the incoming gradient.
#include <ferry/autograd/tensor_math.h>
#include <ferry/autograd/tensor_math_detail.h>

#include <utility>

namespace ferry::kernels {

namespace {

constexpr const char* kOp = "linear";

void check_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  detail::check_same_float(kOp, x, w);
  FERRY_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1), InvalidArgument,
              "linear: expected input [N, K] and weight [M, K] but got ", shape_str(x.shape()),
              " and ", shape_str(w.shape()));
  if (b.defined()) {
    detail::check_same_float(kOp, x, b);
    FERRY_CHECK(b.dim() == 1 && b.size(0) == w.size(0), InvalidArgument,
                "linear: expected bias [", w.size(0), "] for weight ", shape_str(w.shape()),
                " but got ", shape_str(b.shape()));
  }
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, Activation act) {
  check_linear(x, w, b);
  const int64_t n = x.size(0), m = w.size(0);
  Tensor y = empty({n, m}, x.dtype());
  detail::visit_float(kOp, x.dtype(), [&]<class T>() {
    auto out = y.matrix<T>();
    // With K == 0 Eigen writes zeros, the empty sum.
    out.noalias() = x.matrix<T>() * w.matrix<T>().transpose();
    if (!b.defined() && act == Activation::None) return;
    T* o = y.data<T>();
    const T* bias = b.defined() ? b.data<T>() : nullptr;
    const bool relu = act == Activation::Relu;
    for (int64_t r = 0; r < n; ++r, o += m) {
      for (int64_t c = 0; c < m; ++c) {
        const T v = bias != nullptr ? o[c] + bias[c] : o[c];
        o[c] = relu && v < T(0) ? T(0) : v;  // keeps NaN (NaN < 0 is false), as torch's relu
      }
    }
  });
  return y;
}

LinearGrads linear_backward(const Tensor& g, const Tensor& x, const Tensor& w, const Tensor& y,
                            Activation act, bool need_x, bool need_w, bool need_b) {
  // x is needed (and given) only for dw, w only for dx: the shapes come from g and them.
  FERRY_CHECK(g.dim() == 2 && (!x.defined() || x.size(0) == g.size(0)) &&
                  (!w.defined() || w.size(0) == g.size(1)),
              InvalidArgument, "linear: the gradient ", shape_str(g.shape()),
              " does not match the output of input ",
              x.defined() ? shape_str(x.shape()) : std::string("[N, K]"), " and weight ",
              w.defined() ? shape_str(w.shape()) : std::string("[M, K]"));
  FERRY_CHECK((!need_x || w.defined()) && (!need_w || x.defined()) &&
                  (act != Activation::Relu || y.defined()),
              InvalidArgument, "linear: backward needs the weight for dx, the input for dw and "
              "the output for the ReLU mask");
  LinearGrads out;
  detail::visit_float(kOp, g.dtype(), [&]<class T>() {
    Tensor masked = g;
    if (act == Activation::Relu) {
      masked = empty(g.shape(), g.dtype());
      const T* gi = g.data<T>();
      const T* yi = y.data<T>();
      T* mo = masked.data<T>();
      for (int64_t i = 0, e = g.numel(); i < e; ++i) mo[i] = yi[i] > T(0) ? gi[i] : T(0);
    }
    const auto gm = std::as_const(masked).matrix<T>();
    if (need_x) {
      out.x = empty({g.size(0), w.size(1)}, g.dtype());
      out.x.matrix<T>().noalias() = gm * w.matrix<T>();
    }
    if (need_w) {
      out.w = empty({g.size(1), x.size(1)}, g.dtype());
      out.w.matrix<T>().noalias() = gm.transpose() * x.matrix<T>();
    }
    if (need_b) {
      out.b = empty({g.size(1)}, g.dtype());
      out.b.matrix<T>() = gm.colwise().sum();
    }
  });
  return out;
}

}  // namespace ferry::kernels
