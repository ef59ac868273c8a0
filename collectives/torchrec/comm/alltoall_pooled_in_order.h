// alltoall_pooled with its output's column blocks permuted in the same pass (internal): what
// table-wise and column-wise sharding do after every pooled all-to-all (torchrec's
// permute_pooled_embs callback, which puts the features received in rank order back in the
// collection's order), without a pass of its own over the output forward and over the gradient
// backward.
//
// alltoall_pooled_in_order(x, info, order) gives the values and gradients of
// permute_pooled_embs(alltoall_pooled(x, info), dims, permute), bit for bit: the same values
// are moved, and the gradient is divided by the group size (torchrec's gradient division)
// element by element either way. The blocks travel as alltoall_pooled's codec path sends them
// (each rank's block [b, D_i] contiguous); on arrival each one is written straight to its
// columns of the permuted output, and backward each rank's block is gathered from them.
#pragma once

#include <ferry/collectives/torchrec/comm/comm_ops.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace ferry::torchrec::detail {

// Where the columns of each source rank's block land in the permuted output.
class PooledColumnOrder {
 public:
  struct Run {
    int64_t from = 0;   // first column in the source rank's block [b, D_i]
    int64_t to = 0;     // first column in the output [b, sum D]
    int64_t width = 0;  // columns
  };
  // dim_sum_per_rank: D_i per rank. dims: the output's column blocks before the permutation,
  // rank by rank (each rank's blocks add up to its D_i); permute[k]: the block at position k
  // after it (permute_pooled_embs's arguments). Throws InvalidArgument when the blocks do not
  // cover the ranks' columns.
  PooledColumnOrder(const std::vector<int64_t>& dim_sum_per_rank, const std::vector<int64_t>& dims,
                    const std::vector<int64_t>& permute);

  const std::vector<Run>& runs(size_t rank) const { return runs_[rank]; }
  int64_t width() const { return width_; }
  // The width every run has, when they all have the same one (else 0): a copy of a width known
  // at compile time is a few register moves.
  int64_t uniform_width() const { return uniform_width_; }
  const std::vector<int64_t>& dim_sum_per_rank() const { return dim_sum_per_rank_; }

 private:
  std::vector<int64_t> dim_sum_per_rank_;
  std::vector<std::vector<Run>> runs_;  // by source rank, in the order of its block's columns
  int64_t width_ = 0;
  int64_t uniform_width_ = 0;
};

// As above. `order` must have been made for info.dim_sum_per_rank (InvalidArgument otherwise).
// On a group of one rank the exchange is a local copy.
Awaitable<Variable> alltoall_pooled_in_order(const Variable& x, const All2AllPooledInfo& info,
                                             std::shared_ptr<const PooledColumnOrder> order,
                                             const Group& group, const Codecs& codecs);

}  // namespace ferry::torchrec::detail
