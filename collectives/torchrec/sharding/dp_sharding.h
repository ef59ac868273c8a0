// data_parallel sharding (torchrec's dp_sharding): every rank holds the whole table and looks up
// its own B samples; no input or output dist (NoWait). The tables' gradients are not divided
// (no comm op); the ranks average them later -- reduce_data_parallel_gradients
// (data_parallel_tables.h), or a DDP reducer over the dense gradients -- which gives the same
// scale as the global mean loss. Weights are not rescaled (torchrec disables
// CommOpGradientScaling here).
#pragma once

#include <ferry/collectives/torchrec/modules/embedding_lookup.h>
#include <ferry/collectives/torchrec/sharding/embedding_sharding.h>

#include <memory>
#include <string>
#include <vector>

namespace ferry::torchrec {

class DpPooledEmbeddingSharding : public PooledEmbeddingSharding {
 public:
  DpPooledEmbeddingSharding(const detail::ShardedTables& tables, std::vector<int> table_ids,
                            bool is_weighted);
  DistFeaturesAwaitable input_dist(
      const KeyedJaggedTensor& kjt,
      const std::shared_ptr<PooledShardingContext>& ctx) const override;
  Awaitable<Variable> compute_and_output_dist(
      const KeyedJaggedTensor& dist_features,
      const std::shared_ptr<PooledShardingContext>& ctx) const override;

 private:
  bool weighted_;
  std::vector<FeatureLookup> lookups_;
};

class DpSequenceEmbeddingSharding : public SequenceEmbeddingSharding {
 public:
  DpSequenceEmbeddingSharding(const detail::ShardedTables& tables, std::vector<int> table_ids);
  DistFeaturesAwaitable input_dist(
      const KeyedJaggedTensor& kjt,
      const std::shared_ptr<SequenceShardingContext>& ctx) const override;
  Awaitable<std::vector<Variable>> compute_and_output_dist(
      const KeyedJaggedTensor& dist_features,
      const std::shared_ptr<SequenceShardingContext>& ctx) const override;

 private:
  std::vector<FeatureLookup> lookups_;
};

}  // namespace ferry::torchrec
