// ferry::torchrec::JaggedTensor: torchrec's JaggedTensor, a batch of variable-length rows.
//
// Row i of the batch is values[offsets[i] : offsets[i+1]] (rows along dim 0 of `values`), with
// lengths[i] = offsets[i+1] - offsets[i]. Example (3 rows):
//
//   row 0: [10, 11]   row 1: []   row 2: [12]
//   values  = [10, 11, 12]     lengths = [2, 0, 1]     offsets = [0, 2, 2, 3]
//
// `values` may have trailing dims (an EmbeddingCollection's output rows are [n_ids, D]); the
// jagged dim is dim 0. Optional `weights` hold one float32/float64 per value row (per-id
// weights of a weighted feature). lengths and offsets are int32 or int64 (the same dtype when one
// is derived from the other). Either may be given; the other is derived at construction.
//
// A JaggedTensor is a cheap handle: its tensors are shared, not copied (a key of a
// KeyedJaggedTensor is a JaggedTensor of views into the KJT's buffers). Do not write into them.
// Plain data: values and weights are Tensors, not autograd Variables.
#pragma once

#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace ferry::torchrec {

class JaggedTensor {
 public:
  JaggedTensor();  // an empty one: 0 rows, int64 values and lengths, no weights

  // `lengths` or `offsets` (or both, then they must agree); `weights` undefined for none.
  // Validates: values at least 1-D; lengths 1-D int32/int64 without negative entries; offsets
  // 1-D int32/int64, starting at 0, non-decreasing; sum(lengths) == offsets.back() ==
  // values.size(0); weights 1-D float32/float64 with values.size(0) entries. Throws
  // InvalidArgument ("JaggedTensor: ...") naming the offending value.
  JaggedTensor(Tensor values, Tensor lengths, Tensor offsets = {}, Tensor weights = {});

  static JaggedTensor from_lengths(Tensor values, Tensor lengths, Tensor weights = {});
  static JaggedTensor from_offsets(Tensor values, Tensor offsets, Tensor weights = {});
  // One row per tensor (each 1-D, or all with the same trailing dims and dtype); int64 lengths.
  // `weights` (optional) has one tensor per row with the row's length.
  static JaggedTensor from_dense(const std::vector<Tensor>& rows,
                                 const std::vector<Tensor>& weights = {});
  // No rows: values of `values_dtype`, lengths of `lengths_dtype`, weights when `weighted`.
  static JaggedTensor empty(bool weighted = false, DType values_dtype = DType::Int64,
                            DType weights_dtype = DType::Float32,
                            DType lengths_dtype = DType::Int64);

  const Tensor& values() const { return values_; }
  const Tensor& lengths() const { return lengths_; }
  const Tensor& offsets() const { return offsets_; }
  bool has_weights() const { return weights_.defined(); }
  const Tensor& weights() const;                          // throws when there are none
  const Tensor& weights_or_none() const { return weights_; }  // undefined when there are none
  int64_t num_rows() const { return lengths_.numel(); }
  int64_t num_values() const { return values_.size(0); }

  // Row i as a view of values (dim 0 narrowed). to_dense() gives every row.
  Tensor row(int64_t i) const;
  std::vector<Tensor> to_dense() const;
  std::vector<Tensor> to_dense_weights() const;  // throws when there are no weights

  // [num_rows, L] (1-D values only) with row i's values in its first min(len_i, L) columns and
  // `padding_value` after; L = `desired_length` if given (longer rows are truncated), else the
  // longest row's length. Same dtype as values.
  Tensor to_padded_dense(std::optional<int64_t> desired_length = std::nullopt,
                         double padding_value = 0.0) const;
  Tensor to_padded_dense_weights(std::optional<int64_t> desired_length = std::nullopt,
                                 double padding_value = 0.0) const;

 private:
  Tensor values_, lengths_, offsets_, weights_;
};

}  // namespace ferry::torchrec
