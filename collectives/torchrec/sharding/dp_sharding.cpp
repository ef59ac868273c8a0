#include <ferry/collectives/torchrec/sharding/dp_sharding.h>

#include <ferry/autograd/ops.h>
#include <ferry/collectives/torchrec/modules/embedding_lookup.h>

#include <algorithm>

namespace ferry::torchrec {

namespace {
std::vector<FeatureLookup> dp_lookups(const detail::ShardedTables& tables,
                                      const std::vector<int>& table_ids,
                                      std::vector<OutputBlock>& blocks) {
  std::vector<FeatureLookup> out;
  int first_feature = 0;
  for (const auto& t : tables.tables()) {
    const int nf = static_cast<int>(t.config.feature_names.size());
    if (std::find(table_ids.begin(), table_ids.end(), t.index) != table_ids.end())
      for (int f = 0; f < nf; ++f) {
        out.push_back({.table = t.tables.front(),
                       .feature = t.config.feature_names[static_cast<size_t>(f)],
                       .pooling = t.config.pooling});
        blocks.push_back({first_feature + f, 0, t.config.embedding_dim});
      }
    first_feature += nf;
  }
  return out;
}

DistFeaturesAwaitable no_dist(const KeyedJaggedTensor& kjt, EmbeddingShardingContext& ctx) {
  ctx.batch_size = kjt.stride();
  return NoWait<Awaitable<KeyedJaggedTensor>>(NoWait<KeyedJaggedTensor>(kjt));
}
}  // namespace

DpPooledEmbeddingSharding::DpPooledEmbeddingSharding(const detail::ShardedTables& tables,
                                                     std::vector<int> table_ids, bool is_weighted)
    : weighted_(is_weighted), lookups_(dp_lookups(tables, table_ids, blocks_)) {}

DistFeaturesAwaitable DpPooledEmbeddingSharding::input_dist(
    const KeyedJaggedTensor& kjt, const std::shared_ptr<PooledShardingContext>& ctx) const {
  return no_dist(kjt, *ctx);
}

Awaitable<Variable> DpPooledEmbeddingSharding::compute_and_output_dist(
    const KeyedJaggedTensor& kjt, const std::shared_ptr<PooledShardingContext>& ctx) const {
  // The caller's own weights (no dist, no CommOpGradientScaling: torchrec disables it here).
  const Variable w = !weighted_ ? Variable()
                     : ctx->weights.defined() ? ctx->weights
                                              : Variable(kjt.weights());
  if (!ctx->vbe_input) return NoWait<Variable>(pooled_embedding_lookup(lookups_, kjt, w));
  // VBE: each feature pooled over its own batch (padded lookup), read in place by the blocks.
  const Variable padded = pooled_embedding_lookup(lookups_, detail::pad_variable_stride(kjt), w);
  const int64_t C = padded.value().size(1);
  ctx->vbe_blocks.clear();
  int64_t col = 0;
  for (const OutputBlock& b : blocks_) {
    ctx->vbe_blocks.push_back({b.feature, 0, b.width, col, C});
    col += b.width;
  }
  return NoWait<Variable>(reshape(padded, {padded.value().numel()}));
}

DpSequenceEmbeddingSharding::DpSequenceEmbeddingSharding(const detail::ShardedTables& tables,
                                                         std::vector<int> table_ids)
    : lookups_(dp_lookups(tables, table_ids, blocks_)) {}

DistFeaturesAwaitable DpSequenceEmbeddingSharding::input_dist(
    const KeyedJaggedTensor& kjt, const std::shared_ptr<SequenceShardingContext>& ctx) const {
  return no_dist(kjt, *ctx);
}

Awaitable<std::vector<Variable>> DpSequenceEmbeddingSharding::compute_and_output_dist(
    const KeyedJaggedTensor& kjt, const std::shared_ptr<SequenceShardingContext>&) const {
  return NoWait<std::vector<Variable>>(sequence_embedding_lookup(lookups_, kjt));
}

}  // namespace ferry::torchrec
