// 2-D matrix product and transpose.
#include "autograd/tensor_math.h"
#include "autograd/tensor_math_detail.h"

namespace ferry::kernels {

namespace {

std::string operand_str(const Tensor& t, bool transposed) {
  std::string s = shape_str(t.shape());
  if (transposed) s.append(" (transposed)");
  return s;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  detail::check_same_float("matmul", a, b);
  FERRY_CHECK(a.dim() == 2 && b.dim() == 2, InvalidArgument, "matmul: expected 2-D tensors "
              "[N, K] and [K, M] but got shapes ", operand_str(a, transpose_a), " and ",
              operand_str(b, transpose_b));
  const int64_t n = transpose_a ? a.size(1) : a.size(0);
  const int64_t k = transpose_a ? a.size(0) : a.size(1);
  const int64_t k_b = transpose_b ? b.size(1) : b.size(0);
  const int64_t m = transpose_b ? b.size(0) : b.size(1);
  FERRY_CHECK(k == k_b, InvalidArgument, "matmul: shapes ", operand_str(a, transpose_a), " and ",
              operand_str(b, transpose_b), " cannot be multiplied (expected [N, K] and [K, M])");
  Tensor out = empty({n, m}, a.dtype());
  detail::visit_float("matmul", a.dtype(), [&]<class T>() {
    auto o = out.matrix<T>();
    const auto x = a.matrix<T>();
    const auto y = b.matrix<T>();
    // With K == 0 Eigen writes zeros, the empty sum.
    if (transpose_a && transpose_b) {
      o.noalias() = x.transpose() * y.transpose();
    } else if (transpose_a) {
      o.noalias() = x.transpose() * y;
    } else if (transpose_b) {
      o.noalias() = x * y.transpose();
    } else {
      o.noalias() = x * y;
    }
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
