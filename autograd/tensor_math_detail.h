// Shared plumbing of the kernels (internal): dtype dispatch and Eigen array views.
#pragma once

#include <ferry/autograd/tensor_math.h>
#include <ferry/runtime/dtype.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/tensor.h>

#include <Eigen/Core>

namespace ferry::detail {

template <class T>
using ArrayRM = Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ArrayCol = Eigen::Array<T, Eigen::Dynamic, 1>;

// Calls f.template operator()<T>() with T float or double; other dtypes throw the kernels'
// standard message.
template <class F>
decltype(auto) visit_float(const char* op, DType dtype, F&& f) {
  if (dtype == DType::Float64) return f.template operator()<double>();
  if (dtype != DType::Float32) {
    FERRY_THROW(InvalidArgument, op, ": dtype ", dtype_name(dtype),
                " is not supported (float32 or float64)");
  }
  return f.template operator()<float>();
}

// Throws unless a and b share a dtype (which must then be float32 or float64).
void check_same_float(const char* op, const Tensor& a, const Tensor& b);
// Throws unless t is defined, int64 and 1-D; `what` names it ("indices", "offsets").
void check_index_tensor(const char* op, const char* what, const Tensor& t);
// dim in [-rank, rank) made non-negative; throws naming op and shape otherwise.
int64_t normalize_dim(const char* op, int64_t dim, const Shape& shape);

// A shape seen as [outer, extent, inner] around one dim: what every along-a-dim kernel walks.
struct DimSplit {
  int64_t outer = 1;
  int64_t extent = 1;
  int64_t inner = 1;
};
DimSplit split_at(const Shape& shape, int64_t dim);  // dim already normalized

// All elements of t as a column array (any rank).
template <class T>
auto flat(const Tensor& t) {
  return t.vec<T>().array();
}
template <class T>
auto flat(Tensor& t) {
  return t.vec<T>().array();
}

// t's elements as a row-major rows x cols array (rows * cols == numel).
template <class T>
Eigen::Map<const ArrayRM<T>> as_rows(const Tensor& t, int64_t rows, int64_t cols) {
  return Eigen::Map<const ArrayRM<T>>(t.data<T>(), rows, cols);
}
template <class T>
Eigen::Map<ArrayRM<T>> as_rows(Tensor& t, int64_t rows, int64_t cols) {
  return Eigen::Map<ArrayRM<T>>(t.data<T>(), rows, cols);
}

}  // namespace ferry::detail

namespace ferry::detail {

// A fresh tensor holding f.template operator()<T>(x) for x the elements of a as an Eigen array
// expression: map_elements("exp", a, []<class T>(const auto& x) { return x.exp(); }).
template <class F>
Tensor map_elements(const char* op, const Tensor& a, F f) {
  kernels::check_float(op, a);
  Tensor out = empty(a.shape(), a.dtype());
  visit_float(op, a.dtype(),
              [&]<class T>() { flat<T>(out) = f.template operator()<T>(flat<T>(a)); });
  return out;
}

}  // namespace ferry::detail

namespace ferry::detail {

// Throws unless a and b share dtype (float) and shape; `what` says what the operands are.
void check_same_shape(const char* op, const Tensor& a, const Tensor& b, const char* a_name,
                      const char* b_name);

}  // namespace ferry::detail
