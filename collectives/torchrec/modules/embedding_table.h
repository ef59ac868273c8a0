// ferry::torchrec::EmbeddingTable: one embedding table, or one shard of one, with what its
// lookups' backward needs: where its gradient goes (a fused optimizer, or an accumulated
// SparseRowGradient for the non-fused path) and how ids out of range are treated.
//
// A shard is the block [row_offset, row_offset + num_rows) x [col_offset, col_offset +
// num_cols) of a logical table of total_rows x total_cols (TableShard); `weight` holds exactly
// that block ([num_rows, num_cols]). An unsharded table is the shard covering everything. Ids
// are always GLOBAL ([0, total_rows)); a lookup on a row block skips ids outside the block.
//
// weight() is a leaf Variable that requires grad: it puts the lookup on the tape (the lookup
// node takes it as an input) but never receives a dense gradient (its grad() stays undefined).
// The lookup's backward hands the table a SparseRowGradient of the touched rows (local row ids)
// and receive_gradient() either
//   - fused (set_fused_optimizer): applies the optimizer to those rows at once, as fbgemm's
//     fused TBE backward does; the optimizer state lives here, with the shard; or
//   - non-fused: adds it to sparse_grad(); the user applies a SparseOptimizer (step()), or
//     averages it (data-parallel tables: to_dense + all_reduce) and zeroes it.
// Set weight().set_requires_grad(false) to freeze the table (no gradient at all).
//
// A table is used by the thread that made it (like Variables); shared between collections /
// lookups through std::shared_ptr.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/torchrec/modules/fused_optimizer.h>
#include <ferry/collectives/torchrec/modules/sparse_row_gradient.h>
#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace ferry::torchrec {

struct TableShard {
  int64_t row_offset = 0;
  int64_t num_rows = 0;
  int64_t col_offset = 0;
  int64_t num_cols = 0;
};

// fbgemm's BoundsCheckMode, for ids outside [0, total_rows):
//   Fatal   throw InvalidArgument naming the table, the feature, the bag and the id (default)
//   Warning print one warning per lookup to stderr and use row 0 instead (fbgemm's WARNING)
//   Clip    use the nearest valid id (0 or total_rows - 1), silently
enum class BoundsCheckMode { Fatal, Warning, Clip };

class EmbeddingTable {
 public:
  // A whole table: weight [rows, cols] float32/float64 (not copied: the table shares it).
  EmbeddingTable(std::string name, Tensor weight);
  // A shard of a total_rows x total_cols table; weight is [shard.num_rows, shard.num_cols].
  // Validates that the shard lies inside the table. Throws InvalidArgument.
  EmbeddingTable(std::string name, Tensor weight, int64_t total_rows, int64_t total_cols,
                 TableShard shard);

  const std::string& name() const { return name_; }
  const Variable& weight() const { return weight_; }
  Variable& weight() { return weight_; }
  DType dtype() const { return weight_.dtype(); }
  int64_t total_rows() const { return total_rows_; }
  int64_t total_cols() const { return total_cols_; }
  const TableShard& shard() const { return shard_; }
  bool is_whole_table() const {
    return shard_.num_rows == total_rows_ && shard_.num_cols == total_cols_;
  }

  BoundsCheckMode bounds_check_mode() const { return bounds_check_; }
  void set_bounds_check_mode(BoundsCheckMode m) { bounds_check_ = m; }

  // Fused: backward updates the rows itself (new state: step 0, accumulators at their initial
  // value). clear_fused_optimizer() goes back to the non-fused path.
  void set_fused_optimizer(const FusedOptimizerConfig& config);
  void clear_fused_optimizer() { fused_.reset(); }
  bool is_fused() const { return fused_.has_value(); }
  SparseOptimizer* fused_optimizer() { return fused_ ? &*fused_ : nullptr; }
  const SparseOptimizer* fused_optimizer() const { return fused_ ? &*fused_ : nullptr; }

  // Non-fused: the gradient accumulated by the backwards since the last zero_sparse_grad().
  const SparseRowGradient& sparse_grad() const { return grad_; }
  void zero_sparse_grad();
  // Applies `opt` (built for this table's shape) to sparse_grad() and zeroes it.
  void step(SparseOptimizer& opt);

  // Called by the lookups' backward with the gradient of this table's touched rows.
  void receive_gradient(SparseRowGradient&& g);

 private:
  std::string name_;
  Variable weight_;
  int64_t total_rows_ = 0, total_cols_ = 0;
  TableShard shard_;
  BoundsCheckMode bounds_check_ = BoundsCheckMode::Fatal;
  std::optional<SparseOptimizer> fused_;
  SparseRowGradient grad_;
};

}  // namespace ferry::torchrec
