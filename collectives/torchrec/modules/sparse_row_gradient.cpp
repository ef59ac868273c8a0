#include <ferry/collectives/torchrec/modules/sparse_row_gradient.h>

#include <ferry/runtime/error.h>
#include <ferry/runtime/object_pool.h>

#include <utility>
#include <vector>

namespace ferry::torchrec {

SparseRowGradient::SparseRowGradient(int64_t cols, DType dtype)
    : rows_(ferry::empty({0}, DType::Int64)), values_(ferry::empty({0, cols}, dtype)), cols_(cols),
      dtype_(dtype) {
  FERRY_CHECK(cols >= 0, InvalidArgument, "SparseRowGradient: cols must be >= 0, got ", cols);
  FERRY_CHECK(dtype == DType::Float32 || dtype == DType::Float64, InvalidArgument,
              "SparseRowGradient: dtype must be float32 or float64, got ", dtype_name(dtype));
}

SparseRowGradient::SparseRowGradient(Tensor rows, Tensor values)
    : rows_(std::move(rows)), values_(std::move(values)) {
  FERRY_CHECK(rows_.defined() && rows_.dim() == 1 && rows_.dtype() == DType::Int64,
              InvalidArgument, "SparseRowGradient: rows must be a 1-D int64 tensor");
  FERRY_CHECK(values_.defined() && values_.dim() == 2 && values_.size(0) == rows_.numel(),
              InvalidArgument, "SparseRowGradient: values must be [", rows_.numel(),
              ", cols], got ", values_.defined() ? shape_str(values_.shape()) : "undefined");
  FERRY_CHECK(values_.dtype() == DType::Float32 || values_.dtype() == DType::Float64,
              InvalidArgument, "SparseRowGradient: values must be float32 or float64, got ",
              dtype_name(values_.dtype()));
  const int64_t* r = rows_.data<int64_t>();
  const int64_t n = rows_.numel();
  for (int64_t i = 0; i < n; ++i) {
    FERRY_CHECK(r[i] >= 0 && (i == 0 || r[i] > r[i - 1]), InvalidArgument,
                "SparseRowGradient: rows must be >= 0 and strictly increasing, got ", r[i],
                " at position ", i);
  }
  cols_ = values_.size(1);
  dtype_ = values_.dtype();
}

void SparseRowGradient::add_(const SparseRowGradient& other) {
  if (other.empty() && other.cols_ == 0) return;
  if (!rows_.defined() || (empty() && cols_ == 0)) {
    *this = SparseRowGradient(other.rows_.clone(), other.values_.clone());
    return;
  }
  FERRY_CHECK(other.cols_ == cols_ && other.dtype_ == dtype_, InvalidArgument,
              "SparseRowGradient::add_: [*, ", cols_, "] ", dtype_name(dtype_), " + [*, ",
              other.cols_, "] ", dtype_name(other.dtype_));
  if (other.empty()) return;
  if (empty()) {  // nothing to merge with: a copy of the other
    *this = SparseRowGradient(other.rows_.clone(), other.values_.clone());
    return;
  }
  const int64_t* a = rows_.data<int64_t>();
  const int64_t* b = other.rows_.data<int64_t>();
  const int64_t na = num_rows(), nb = other.num_rows();
  ferry::detail::ScopedSpare<std::vector<int64_t>> merged_list;  // kept by the thread
  std::vector<int64_t>& merged = *merged_list;
  merged.reserve(static_cast<size_t>(na + nb));
  int64_t i = 0, j = 0;
  while (i < na || j < nb) {
    if (j == nb || (i < na && a[i] < b[j])) {
      merged.push_back(a[i++]);
    } else if (i == na || b[j] < a[i]) {
      merged.push_back(b[j++]);
    } else {
      merged.push_back(a[i]);
      ++i;
      ++j;
    }
  }
  Tensor out = zeros({static_cast<int64_t>(merged.size()), cols_}, dtype_);
  visit_dtype(dtype_, [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) {
      auto o = out.matrix<T>();
      auto va = values_.matrix<T>();
      auto vb = other.values_.matrix<T>();
      int64_t k = 0, x = 0, y = 0;
      for (int64_t r : merged) {
        if (x < na && a[x] == r) o.row(k) = va.row(x++);
        if (y < nb && b[y] == r) o.row(k) += vb.row(y++);
        ++k;
      }
    }
  });
  *this = SparseRowGradient(from_vector(merged), out);
}

void SparseRowGradient::add_(SparseRowGradient&& other) {
  // Where the copying form would make this a copy of other (this holds no rows, and its shape
  // is unset or other's), other itself is taken; every other case is the copying form's.
  if (!other.empty() && empty() &&
      (cols_ == 0 || (other.cols_ == cols_ && other.dtype_ == dtype_))) {
    *this = std::move(other);
    return;
  }
  add_(other);
}

void SparseRowGradient::scale_(double factor) {
  if (empty()) return;
  visit_dtype(dtype_, [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) values_.vec<T>() *= static_cast<T>(factor);
  });
  values_.bump_version();
}

Tensor SparseRowGradient::to_dense(int64_t num_rows) const {
  Tensor out = zeros({num_rows, cols_}, dtype_);
  if (empty()) return out;
  const int64_t* r = rows_.data<int64_t>();
  FERRY_CHECK(r[this->num_rows() - 1] < num_rows, InvalidArgument,
              "SparseRowGradient::to_dense: row ", r[this->num_rows() - 1], " of a table of ",
              num_rows, " rows");
  visit_dtype(dtype_, [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) {
      auto o = out.matrix<T>();
      auto v = values_.matrix<T>();
      for (int64_t i = 0; i < this->num_rows(); ++i) o.row(r[i]) = v.row(i);
    }
  });
  return out;
}

}  // namespace ferry::torchrec
