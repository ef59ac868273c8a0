// Matrix products (2-D and batched) and transposes.
#include <ferry/autograd/tensor_math.h>
#include <ferry/autograd/tensor_math_detail.h>

#include <utility>
#include <vector>

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

namespace ferry::kernels {

Tensor bmm(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  detail::check_same_float("bmm", a, b);
  FERRY_CHECK(a.dim() == 3 && b.dim() == 3, InvalidArgument, "bmm: expected 3-D tensors "
              "[B, N, K] and [B, K, M] but got shapes ", operand_str(a, transpose_a), " and ",
              operand_str(b, transpose_b));
  const int64_t batch = a.size(0);
  const int64_t n = transpose_a ? a.size(2) : a.size(1);
  const int64_t k = transpose_a ? a.size(1) : a.size(2);
  const int64_t k_b = transpose_b ? b.size(2) : b.size(1);
  const int64_t m = transpose_b ? b.size(1) : b.size(2);
  FERRY_CHECK(batch == b.size(0) && k == k_b, InvalidArgument, "bmm: shapes ",
              operand_str(a, transpose_a), " and ", operand_str(b, transpose_b),
              " cannot be multiplied (expected [B, N, K] and [B, K, M])");
  Tensor out = empty({batch, n, m}, a.dtype());
  detail::visit_float("bmm", a.dtype(), [&]<class T>() {
    using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const int64_t a_rows = a.size(1), a_cols = a.size(2);
    const int64_t b_rows = b.size(1), b_cols = b.size(2);
    for (int64_t i = 0; i < batch; ++i) {
      Eigen::Map<const Mat> x(a.data<T>() + i * a_rows * a_cols, a_rows, a_cols);
      Eigen::Map<const Mat> y(b.data<T>() + i * b_rows * b_cols, b_rows, b_cols);
      Eigen::Map<Mat> o(out.data<T>() + i * n * m, n, m);
      if (transpose_a && transpose_b) {
        o.noalias() = x.transpose() * y.transpose();
      } else if (transpose_a) {
        o.noalias() = x.transpose() * y;
      } else if (transpose_b) {
        o.noalias() = x * y.transpose();
      } else {
        o.noalias() = x * y;
      }
    }
  });
  return out;
}

Tensor transpose(const Tensor& a, int64_t dim0, int64_t dim1) {
  check_float("transpose", a);
  const Shape& in_shape = a.shape();
  const int64_t d0 = detail::normalize_dim("transpose", dim0, in_shape);
  const int64_t d1 = detail::normalize_dim("transpose", dim1, in_shape);
  Shape out_shape = in_shape;
  std::swap(out_shape[static_cast<size_t>(d0)], out_shape[static_cast<size_t>(d1)]);
  Tensor out = empty(out_shape, a.dtype());
  const size_t rank = in_shape.size();
  // Input strides (row-major), read in the output's dim order.
  std::vector<int64_t> in_stride(rank, 1);
  for (size_t d = rank; d-- > 1;) in_stride[d - 1] = in_stride[d] * in_shape[d];
  std::swap(in_stride[static_cast<size_t>(d0)], in_stride[static_cast<size_t>(d1)]);
  const int64_t total = a.numel();
  detail::visit_float("transpose", a.dtype(), [&]<class T>() {
    const T* src = a.data<T>();
    T* dst = out.data<T>();
    std::vector<int64_t> index(rank, 0);
    int64_t offset = 0;  // of index in the input
    for (int64_t e = 0; e < total; ++e) {
      dst[e] = src[offset];
      for (size_t d = rank; d-- > 0;) {  // odometer over the output's index
        if (++index[d] < out_shape[d]) {
          offset += in_stride[d];
          break;
        }
        offset -= in_stride[d] * (index[d] - 1);
        index[d] = 0;
      }
    }
  });
  return out;
}

}  // namespace ferry::kernels
