// torchrec's reduce-scatter and all-gather output dists (dist_data.py):
// PooledEmbeddingsReduceScatter (row-wise sharding's output dist, and table-row-wise's intra-node
// step), VariableBatchPooledEmbeddingsReduceScatter (row-wise with VBE) and
// PooledEmbeddingsAllGather. Each launches its comm op and returns a PooledEmbeddingsAwaitable.
//
//   // row-wise: every rank holds partial pooled sums of every rank's samples
//   PooledEmbeddingsReduceScatter dist(group);
//   Variable mine = dist.forward(partials, batch_size_per_rank).wait();  // summed, my samples
//
// Backward: the comm op's (the gradient all-gathered / reduce-scattered, / W when dividing).
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/group.h>
#include <ferry/collectives/torchrec/comm/comm_ops.h>
#include <ferry/collectives/torchrec/dist_data/embeddings_awaitable.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace ferry::torchrec {

class PooledEmbeddingsReduceScatter {
 public:
  explicit PooledEmbeddingsReduceScatter(Group group, Codecs codecs = std::nullopt);

  // local_embs: [sum(input_splits), D] (num_buckets x batch rows; block k holds the partial
  // sums destined to rank k). With input_splits holding more than one distinct value:
  // reduce_scatter_v_pooled (output [input_splits[me], D]); otherwise (absent, empty, or all
  // equal) reduce_scatter_base_pooled, which needs size(0) % W == 0 (output [size(0)/W, D]).
  // Must be called on every rank of the group, in the same order.
  PooledEmbeddingsAwaitable forward(
      const Variable& local_embs,
      const std::optional<std::vector<int64_t>>& input_splits = std::nullopt) const;
  PooledEmbeddingsAwaitable operator()(
      const Variable& local_embs,
      const std::optional<std::vector<int64_t>>& input_splits = std::nullopt) const {
    return forward(local_embs, input_splits);
  }
  const Group& group() const { return group_; }

 private:
  Group group_;
  Codecs codecs_;
};

class VariableBatchPooledEmbeddingsReduceScatter {
 public:
  explicit VariableBatchPooledEmbeddingsReduceScatter(Group group, Codecs codecs = std::nullopt);

  // local_embs: 1-D (read flat), for each rank r in order sum_f B[r][f] * embedding_dims[f]
  // elements; output 1-D, my block summed over ranks (reduce_scatter_v_per_feature_pooled).
  PooledEmbeddingsAwaitable forward(
      const Variable& local_embs,
      const std::vector<std::vector<int64_t>>& batch_size_per_rank_per_feature,
      const std::vector<int64_t>& embedding_dims) const;
  PooledEmbeddingsAwaitable operator()(
      const Variable& local_embs,
      const std::vector<std::vector<int64_t>>& batch_size_per_rank_per_feature,
      const std::vector<int64_t>& embedding_dims) const {
    return forward(local_embs, batch_size_per_rank_per_feature, embedding_dims);
  }
  const Group& group() const { return group_; }

 private:
  Group group_;
  Codecs codecs_;
};

class PooledEmbeddingsAllGather {
 public:
  explicit PooledEmbeddingsAllGather(Group group, Codecs codecs = std::nullopt);

  // local_emb: [B, D], the same shape on every rank; output [W*B, D], rank j's block j
  // (all_gather_base_pooled).
  PooledEmbeddingsAwaitable forward(const Variable& local_emb) const;
  PooledEmbeddingsAwaitable operator()(const Variable& local_emb) const {
    return forward(local_emb);
  }
  const Group& group() const { return group_; }

 private:
  Group group_;
  Codecs codecs_;
};

}  // namespace ferry::torchrec
