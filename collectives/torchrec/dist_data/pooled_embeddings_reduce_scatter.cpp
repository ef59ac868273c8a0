#include <ferry/collectives/torchrec/dist_data/pooled_embeddings_reduce_scatter.h>

#include <ferry/collectives/torchrec/utils/format.h>
#include <ferry/runtime/error.h>

#include <set>
#include <utility>

namespace ferry::torchrec {

PooledEmbeddingsReduceScatter::PooledEmbeddingsReduceScatter(Group group, Codecs codecs)
    : group_(std::move(group)), codecs_(std::move(codecs)) {
  detail::check_group(group_, "PooledEmbeddingsReduceScatter");
}

PooledEmbeddingsAwaitable PooledEmbeddingsReduceScatter::forward(
    const Variable& local_embs, const std::optional<std::vector<int64_t>>& input_splits) const {
  // As torchrec's: the v variant only when the splits differ; equal (or absent) splits take the
  // base collective, which checks size(0) % W itself.
  if (input_splits && std::set<int64_t>(input_splits->begin(), input_splits->end()).size() > 1)
    return PooledEmbeddingsAwaitable(
        reduce_scatter_v_pooled(local_embs, *input_splits, group_, codecs_));
  return PooledEmbeddingsAwaitable(reduce_scatter_base_pooled(local_embs, group_, codecs_));
}

VariableBatchPooledEmbeddingsReduceScatter::VariableBatchPooledEmbeddingsReduceScatter(
    Group group, Codecs codecs)
    : group_(std::move(group)), codecs_(std::move(codecs)) {
  detail::check_group(group_, "VariableBatchPooledEmbeddingsReduceScatter");
}

PooledEmbeddingsAwaitable VariableBatchPooledEmbeddingsReduceScatter::forward(
    const Variable& local_embs,
    const std::vector<std::vector<int64_t>>& batch_size_per_rank_per_feature,
    const std::vector<int64_t>& embedding_dims) const {
  return PooledEmbeddingsAwaitable(reduce_scatter_v_per_feature_pooled(
      local_embs, batch_size_per_rank_per_feature, embedding_dims, group_, codecs_));
}

PooledEmbeddingsAllGather::PooledEmbeddingsAllGather(Group group, Codecs codecs)
    : group_(std::move(group)), codecs_(std::move(codecs)) {
  detail::check_group(group_, "PooledEmbeddingsAllGather");
}

PooledEmbeddingsAwaitable PooledEmbeddingsAllGather::forward(const Variable& local_emb) const {
  return PooledEmbeddingsAwaitable(all_gather_base_pooled(local_emb, group_, codecs_));
}

}  // namespace ferry::torchrec
