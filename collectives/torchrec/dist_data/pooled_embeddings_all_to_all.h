// torchrec's pooled-embedding all-to-all output dists (dist_data.py): PooledEmbeddingsAllToAll and
// VariableBatchPooledEmbeddingsAllToAll, the output dist of table-wise, column-wise and
// table-column-wise sharding (and the cross-node step of table-row-wise). Each launches its comm op
// and returns a PooledEmbeddingsAwaitable carrying the module's callbacks.
//
//   // rank me holds tables of total dim dims[me]; every rank has B samples; W ranks
//   PooledEmbeddingsAllToAll dist(group, dims, {permute_pooled_embs_callback(perm)});
//   PooledEmbeddingsAwaitable a = dist.forward(local_embs);   // [W*B, dims[me]], in flight
//   Variable y = a.wait();                                     // [B, sum(dims)], permuted
//
// Backward: the comm op's (the column blocks of the gradient sent back, / W when dividing);
// the callbacks are differentiable when built from autograd ops (permute_pooled_embs_callback
// is).
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/group.h>
#include <ferry/collectives/torchrec/comm/comm_ops.h>
#include <ferry/collectives/torchrec/dist_data/embeddings_awaitable.h>
#include <ferry/collectives/torchrec/sparse/bucketize.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace ferry::torchrec {

namespace detail {
class PooledColumnOrder;  // comm/alltoall_pooled_in_order.h
}

using EmbeddingsCallback = Awaitable<Variable>::Callback;

// The differentiable column permutation column-wise sharding appends to its output dist
// (torchrec's PermutePooledEmbeddingsSplit as a module): the output's column blocks of widths
// permute.dims() reordered by permute.permute(); its gradient flows back through the inverse.
EmbeddingsCallback permute_pooled_embs_callback(PermutePooledEmbeddingsSplit permute);

class PooledEmbeddingsAllToAll {
 public:
  // dim_sum_per_rank[i]: total embedding columns rank i holds (one entry per rank, >= 0).
  // callbacks: applied in order to every forward's result, after the all-to-all.
  PooledEmbeddingsAllToAll(Group group, std::vector<int64_t> dim_sum_per_rank,
                           std::vector<EmbeddingsCallback> callbacks = {},
                           Codecs codecs = std::nullopt);

  // local_embs: [B_g, dim_sum_per_rank[me]], rows grouped by the rank that owns the samples
  // (rank j's batch_size_per_rank[j] rows, in rank order). Without batch_size_per_rank every
  // rank owns B_g / W rows (B_g % W == 0, else InvalidArgument). Output on rank me:
  // [batch_size_per_rank[me], sum(dim_sum_per_rank)], source ranks' columns side by side.
  // Must be called on every rank of the group, in the same order.
  PooledEmbeddingsAwaitable forward(
      const Variable& local_embs,
      const std::optional<std::vector<int64_t>>& batch_size_per_rank = std::nullopt) const;
  PooledEmbeddingsAwaitable operator()(
      const Variable& local_embs,
      const std::optional<std::vector<int64_t>>& batch_size_per_rank = std::nullopt) const {
    return forward(local_embs, batch_size_per_rank);
  }

  // Puts every forward's result in `permute`'s column order as part of the exchange, before
  // the callbacks run: the values and gradients of permute_pooled_embs_callback(permute) as the
  // first callback, bit for bit, without that callback's own pass over the output forward and
  // over its gradient backward (each received block is written straight to its columns, and
  // gathered back from them). permute.dims() must split each rank's dim_sum_per_rank in rank
  // order (InvalidArgument otherwise). ferry's addition: the sharded collections use it to
  // bring the features received in rank order back to the collection's order.
  void permute_in_exchange(const PermutePooledEmbeddingsSplit& permute);

  // The module's callbacks (torchrec's `callbacks` property): appending here affects later
  // forwards, not awaitables already returned.
  std::vector<EmbeddingsCallback>& callbacks() { return callbacks_; }
  const std::vector<EmbeddingsCallback>& callbacks() const { return callbacks_; }
  const std::vector<int64_t>& dim_sum_per_rank() const { return dim_sum_per_rank_; }
  const Group& group() const { return group_; }
  const Codecs& codecs() const { return codecs_; }

 private:
  Group group_;
  std::vector<int64_t> dim_sum_per_rank_;
  std::vector<EmbeddingsCallback> callbacks_;
  Codecs codecs_;
  // permute_in_exchange's: the columns' places in the exchange (null: none), and the same
  // permutation as a callback, for a group of one rank, which exchanges nothing.
  std::shared_ptr<const detail::PooledColumnOrder> order_;
  EmbeddingsCallback order_callback_;
};

// Per-feature variable batch (VBE).
class VariableBatchPooledEmbeddingsAllToAll {
 public:
  // emb_dim_per_rank_per_feature[i][f]: embedding dim of rank i's feature f (the same on
  // every rank; one list per rank).
  VariableBatchPooledEmbeddingsAllToAll(Group group,
                                        std::vector<std::vector<int64_t>> emb_dim_per_rank_per_feature,
                                        std::vector<EmbeddingsCallback> callbacks = {},
                                        Codecs codecs = std::nullopt);

  // local_embs: 1-D (read flat), for each destination rank i in order, its features'
  // embeddings (feature-major, then sample, then dim); batch_size_per_rank_per_feature[i][f]:
  // samples rank i needs of my feature f; batch_size_per_feature_pre_a2a over (owner rank i,
  // feature f of i), flattened: my batch size of that feature. Output: 1-D, the blocks from
  // each source rank in rank order (variable_batch_alltoall_pooled).
  PooledEmbeddingsAwaitable forward(
      const Variable& local_embs,
      const std::vector<std::vector<int64_t>>& batch_size_per_rank_per_feature,
      const std::vector<int64_t>& batch_size_per_feature_pre_a2a) const;
  PooledEmbeddingsAwaitable operator()(
      const Variable& local_embs,
      const std::vector<std::vector<int64_t>>& batch_size_per_rank_per_feature,
      const std::vector<int64_t>& batch_size_per_feature_pre_a2a) const {
    return forward(local_embs, batch_size_per_rank_per_feature, batch_size_per_feature_pre_a2a);
  }

  std::vector<EmbeddingsCallback>& callbacks() { return callbacks_; }
  const std::vector<EmbeddingsCallback>& callbacks() const { return callbacks_; }
  const std::vector<std::vector<int64_t>>& emb_dim_per_rank_per_feature() const {
    return emb_dims_;
  }
  const Group& group() const { return group_; }

 private:
  Group group_;
  std::vector<std::vector<int64_t>> emb_dims_;
  std::vector<EmbeddingsCallback> callbacks_;
  Codecs codecs_;
};

}  // namespace ferry::torchrec
