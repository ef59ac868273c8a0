// Argument checks and names shared by every kernel.
#include <ferry/autograd/tensor_math.h>
#include <ferry/autograd/tensor_math_detail.h>

namespace ferry {

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::None: return "none";
    case Reduction::Mean: return "mean";
    case Reduction::Sum: return "sum";
  }
  return "?";  // unreachable: every enumerator is handled above
}

const char* embedding_bag_mode_name(EmbeddingBagMode m) {
  switch (m) {
    case EmbeddingBagMode::Sum: return "sum";
    case EmbeddingBagMode::Mean: return "mean";
  }
  return "?";  // unreachable: every enumerator is handled above
}

namespace kernels {

void check_float(const char* op, const Tensor& t) {
  FERRY_CHECK(t.defined(), InvalidArgument, op, ": a tensor argument is undefined");
  detail::visit_float(op, t.dtype(), []<class T>() {});
}

}  // namespace kernels

namespace detail {

void check_same_float(const char* op, const Tensor& a, const Tensor& b) {
  kernels::check_float(op, a);
  kernels::check_float(op, b);
  FERRY_CHECK(a.dtype() == b.dtype(), InvalidArgument, op, ": dtypes must match but are ",
              dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
}

void check_index_tensor(const char* op, const char* what, const Tensor& t) {
  FERRY_CHECK(t.defined(), InvalidArgument, op, ": ", what, " is undefined");
  FERRY_CHECK(t.dtype() == DType::Int64, InvalidArgument, op, ": ", what,
              " must be int64 but is ", dtype_name(t.dtype()));
  FERRY_CHECK(t.dim() == 1, InvalidArgument, op, ": ", what, " must be 1-D but has shape ",
              shape_str(t.shape()));
}

void check_same_shape(const char* op, const Tensor& a, const Tensor& b, const char* a_name,
                      const char* b_name) {
  check_same_float(op, a, b);
  FERRY_CHECK(a.shape() == b.shape(), InvalidArgument, op, ": ", a_name, " and ", b_name,
              " must have the same shape but have shapes ", shape_str(a.shape()), " and ",
              shape_str(b.shape()));
}

int64_t normalize_dim(const char* op, int64_t dim, const Shape& shape) {
  const auto rank = static_cast<int64_t>(shape.size());
  FERRY_CHECK(dim >= -rank && dim < rank, InvalidArgument, op, ": dim ", dim,
              " is out of range for shape ", shape_str(shape), " (expected [", -rank, ", ",
              rank - 1, "])");
  return dim < 0 ? dim + rank : dim;
}

DimSplit split_at(const Shape& shape, int64_t dim) {
  DimSplit s;
  const auto d = static_cast<size_t>(dim);
  for (size_t i = 0; i < d; ++i) s.outer *= shape[i];
  s.extent = shape[d];
  for (size_t i = d + 1; i < shape.size(); ++i) s.inner *= shape[i];
  return s;
}

}  // namespace detail
}  // namespace ferry
