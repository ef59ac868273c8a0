// ferry::torchrec::SparseRowGradient: the gradient of an embedding table (or of one shard of
// it) as the rows a batch touched and their accumulated gradients. Never table-sized.
//
//   rows   [n]     int64, strictly increasing: the touched rows, LOCAL to the table or shard
//                  the gradient belongs to (row r of a row-wise shard starting at row_offset is
//                  global row row_offset + r)
//   values [n, D]  the accumulated gradient of each touched row, the table's dtype; D is the
//                  table's (shard's) column count
//
// A row is "touched" when one of its ids occurred in the batch, even if its accumulated
// gradient is exactly 0 (lazy Adam updates such a row, as fbgemm does).
//
// Duplicates are accumulated in occurrence order (the order of the ids in the KJT, feature by
// feature of the lookup), which is what a plain loop `dense[id] += contribution` would do, so a
// reference can reproduce the sums bit for bit.
#pragma once

#include <ferry/runtime/tensor.h>

#include <cstdint>

namespace ferry::torchrec {

class SparseRowGradient {
 public:
  SparseRowGradient() = default;  // empty: no rows (cols() 0, float32)
  // An empty gradient of a table with `cols` columns.
  SparseRowGradient(int64_t cols, DType dtype);
  // Validates: rows 1-D int64 strictly increasing and >= 0, values [rows.numel(), cols]
  // float32/float64. Throws InvalidArgument "SparseRowGradient: ...".
  SparseRowGradient(Tensor rows, Tensor values);

  const Tensor& rows() const { return rows_; }
  const Tensor& values() const { return values_; }
  int64_t num_rows() const { return rows_.defined() ? rows_.numel() : 0; }
  int64_t cols() const { return cols_; }
  DType dtype() const { return dtype_; }
  bool empty() const { return num_rows() == 0; }

  // this + other: the union of the rows, shared rows added (this's value + other's). Both must
  // have the same cols and dtype (an empty default-constructed one adopts other's).
  void add_(const SparseRowGradient& other);
  // The same, taking other's tensors instead of copying them when this holds no rows yet (the
  // usual case: a table's first gradient since it was zeroed).
  void add_(SparseRowGradient&& other);
  // Multiplies every value (e.g. 1 / world size when averaging by hand).
  void scale_(double factor);
  // The dense [num_rows, cols] gradient (zeros for untouched rows). For tests, small tables
  // and data-parallel tables that are reduced by a dense all_reduce; throws if a row is
  // >= num_rows.
  Tensor to_dense(int64_t num_rows) const;

 private:
  Tensor rows_, values_;
  int64_t cols_ = 0;
  DType dtype_ = DType::Float32;
};

}  // namespace ferry::torchrec
