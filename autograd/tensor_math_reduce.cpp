// sum and mean over everything or along one dim, and the expansions that are their backward.
#include <ferry/autograd/tensor_math.h>
#include <ferry/autograd/tensor_math_detail.h>

namespace ferry::kernels {

namespace {

using detail::ArrayRM;
using detail::flat;

// torch lets a 0-d tensor be reduced along dim 0 or -1 as if it were one element.
void check_scalar_dim(const char* op, int64_t dim) {
  FERRY_CHECK(dim == 0 || dim == -1, InvalidArgument, op, ": dim ", dim,
              " is out of range for a 0-d tensor (expected 0 or -1)");
}

Shape reduced_shape(const Shape& shape, int64_t dim, bool keepdim) {
  Shape out = shape;
  if (keepdim) {
    out[static_cast<size_t>(dim)] = 1;
  } else {
    out.erase(out.begin() + dim);
  }
  return out;
}

Tensor sum_along(const char* op, const Tensor& a, int64_t dim, bool keepdim, bool average) {
  check_float(op, a);
  if (a.dim() == 0) {
    check_scalar_dim(op, dim);
    return a.clone();
  }
  dim = detail::normalize_dim(op, dim, a.shape());
  const detail::DimSplit s = detail::split_at(a.shape(), dim);
  Tensor out = empty(reduced_shape(a.shape(), dim, keepdim), a.dtype());
  detail::visit_float(op, a.dtype(), [&]<class T>() {
    auto o = detail::as_rows<T>(out, s.outer, s.inner);
    if (s.inner == 1) {
      o = detail::as_rows<T>(a, s.outer, s.extent).rowwise().sum();
    } else {
      for (int64_t i = 0; i < s.outer; ++i) {
        Eigen::Map<const ArrayRM<T>> block(a.data<T>() + i * s.extent * s.inner, s.extent,
                                           s.inner);
        o.row(i) = block.colwise().sum();
      }
    }
    // Dividing (rather than multiplying by 1/extent) keeps exact means exact; 0/0 gives NaN
    // for an empty dim, as torch.
    if (average) flat<T>(out) /= static_cast<T>(s.extent);
  });
  return out;
}

}  // namespace

Tensor sum(const Tensor& a) {
  check_float("sum", a);
  Tensor out = empty({}, a.dtype());
  detail::visit_float("sum", a.dtype(), [&]<class T>() { *out.data<T>() = flat<T>(a).sum(); });
  return out;
}

Tensor mean(const Tensor& a) {
  check_float("mean", a);
  Tensor out = empty({}, a.dtype());
  detail::visit_float("mean", a.dtype(), [&]<class T>() {
    *out.data<T>() = flat<T>(a).sum() / static_cast<T>(a.numel());
  });
  return out;
}

Tensor sum(const Tensor& a, int64_t dim, bool keepdim) {
  return sum_along("sum", a, dim, keepdim, false);
}

Tensor mean(const Tensor& a, int64_t dim, bool keepdim) {
  return sum_along("mean", a, dim, keepdim, true);
}

Tensor expand_scalar(const Tensor& grad, const Shape& shape) {
  check_float("expand_scalar", grad);
  FERRY_CHECK(grad.numel() == 1, InvalidArgument, "expand_scalar: expected a one-element "
              "gradient but got shape ", shape_str(grad.shape()));
  Tensor out = empty(shape, grad.dtype());
  detail::visit_float("expand_scalar", grad.dtype(),
                      [&]<class T>() { flat<T>(out).setConstant(*grad.data<T>()); });
  return out;
}

Tensor expand_dim(const Tensor& grad, const Shape& shape, int64_t dim) {
  check_float("expand_dim", grad);
  if (shape.empty()) {
    check_scalar_dim("expand_dim", dim);
    FERRY_CHECK(grad.numel() == 1, InvalidArgument, "expand_dim: expected a one-element "
                "gradient for shape [] but got shape ", shape_str(grad.shape()));
    return grad.reshape({}).clone();
  }
  dim = detail::normalize_dim("expand_dim", dim, shape);
  const detail::DimSplit s = detail::split_at(shape, dim);
  // keepdim or not, the reduced gradient has the same elements in the same order.
  FERRY_CHECK(grad.numel() == s.outer * s.inner, InvalidArgument, "expand_dim: a gradient of "
              "shape ", shape_str(grad.shape()), " does not match shape ", shape_str(shape),
              " reduced along dim ", dim);
  Tensor out = empty(shape, grad.dtype());
  detail::visit_float("expand_dim", grad.dtype(), [&]<class T>() {
    auto g = detail::as_rows<T>(grad, s.outer, s.inner);
    for (int64_t i = 0; i < s.outer; ++i) {
      Eigen::Map<ArrayRM<T>> block(out.data<T>() + i * s.extent * s.inner, s.extent, s.inner);
      block = g.row(i).replicate(s.extent, 1);
    }
  });
  return out;
}

}  // namespace ferry::kernels
