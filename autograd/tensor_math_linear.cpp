// 2-D matrix product and transpose.
#include "autograd/tensor_math.h"
#include "autograd/tensor_math_detail.h"

namespace ferry::kernels {

Tensor matmul(const Tensor& a, const Tensor& b) {
  detail::check_same_float("matmul", a, b);
  FERRY_CHECK(a.dim() == 2 && b.dim() == 2, InvalidArgument, "matmul: expected 2-D tensors "
              "[N, K] and [K, M] but got shapes ", shape_str(a.shape()), " and ",
              shape_str(b.shape()));
  FERRY_CHECK(a.size(1) == b.size(0), InvalidArgument, "matmul: shapes ", shape_str(a.shape()),
              " and ", shape_str(b.shape()), " cannot be multiplied (expected [N, K] and [K, M])");
  Tensor out = empty({a.size(0), b.size(1)}, a.dtype());
  detail::visit_float("matmul", a.dtype(), [&]<class T>() {
    // With K == 0 Eigen writes zeros, the empty sum.
    out.matrix<T>().noalias() = a.matrix<T>() * b.matrix<T>();
  });
  return out;
}

Tensor transpose(const Tensor& a) {
  check_float("transpose", a);
  FERRY_CHECK(a.dim() == 2, InvalidArgument, "transpose: expected a 2-D tensor but got shape ",
              shape_str(a.shape()));
  Tensor out = empty({a.size(1), a.size(0)}, a.dtype());
  detail::visit_float("transpose", a.dtype(),
                      [&]<class T>() { out.matrix<T>() = a.matrix<T>().transpose(); });
  return out;
}

}  // namespace ferry::kernels
