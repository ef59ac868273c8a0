#include <ferry/collectives/torchrec/modules/embedding_table.h>

#include <ferry/runtime/error.h>

#include <utility>

namespace ferry::torchrec {

EmbeddingTable::EmbeddingTable(std::string name, Tensor weight)
    : EmbeddingTable(name, weight, weight.defined() && weight.dim() == 2 ? weight.size(0) : 0,
                     weight.defined() && weight.dim() == 2 ? weight.size(1) : 0,
                     TableShard{0, weight.defined() && weight.dim() == 2 ? weight.size(0) : 0, 0,
                                weight.defined() && weight.dim() == 2 ? weight.size(1) : 0}) {}

EmbeddingTable::EmbeddingTable(std::string name, Tensor weight, int64_t total_rows,
                               int64_t total_cols, TableShard shard)
    : name_(std::move(name)), total_rows_(total_rows), total_cols_(total_cols), shard_(shard) {
  const std::string w = ferry::detail::str("EmbeddingTable \"", name_, "\": ");
  FERRY_CHECK(weight.defined() && weight.dim() == 2, InvalidArgument, w,
              "the weight must be a 2-D tensor, got ",
              weight.defined() ? shape_str(weight.shape()) : "undefined");
  FERRY_CHECK(weight.dtype() == DType::Float32 || weight.dtype() == DType::Float64,
              InvalidArgument, w, "the weight must be float32 or float64, got ",
              dtype_name(weight.dtype()));
  FERRY_CHECK(total_rows >= 1 && total_cols >= 1, InvalidArgument, w,
              "the table must have at least one row and one column, got ", total_rows, " x ",
              total_cols);
  FERRY_CHECK(shard.row_offset >= 0 && shard.num_rows >= 0 && shard.col_offset >= 0 &&
                  shard.num_cols >= 1 && shard.row_offset + shard.num_rows <= total_rows &&
                  shard.col_offset + shard.num_cols <= total_cols,
              InvalidArgument, w, "shard rows [", shard.row_offset, ", ",
              shard.row_offset + shard.num_rows, ") x cols [", shard.col_offset, ", ",
              shard.col_offset + shard.num_cols, ") is not inside the ", total_rows, " x ",
              total_cols, " table");
  FERRY_CHECK(weight.size(0) == shard.num_rows && weight.size(1) == shard.num_cols,
              InvalidArgument, w, "the weight of a [", shard.num_rows, ", ", shard.num_cols,
              "] shard is ", shape_str(weight.shape()));
  weight_ = Variable(std::move(weight), true, name_ + ".weight");
  grad_ = SparseRowGradient(shard.num_cols, weight_.dtype());
}

void EmbeddingTable::set_fused_optimizer(const FusedOptimizerConfig& config) {
  fused_.emplace(config, shard_.num_rows, shard_.num_cols, dtype());
}

void EmbeddingTable::zero_sparse_grad() { grad_ = SparseRowGradient(shard_.num_cols, dtype()); }

void EmbeddingTable::step(SparseOptimizer& opt) {
  Tensor w = weight_.value();
  opt.step(w, grad_);
  zero_sparse_grad();
}

void EmbeddingTable::receive_gradient(SparseRowGradient&& g) {
  if (fused_) {
    Tensor w = weight_.value();
    fused_->step(w, g);
  } else {
    grad_.add_(std::move(g));
  }
}

}  // namespace ferry::torchrec
