// ferry::torchrec::ShardedEmbeddingCollection: an EmbeddingCollection (per-id "sequence"
// embeddings) sharded over a world group by a plan (torchrec's ShardedEmbeddingCollection).
//
//   ShardedEmbeddingCollection sec(configs, plan, world, {}, fused, seed);
//   SequenceEmbeddings out = sec.forward(local_kjt);   // per feature [ids, D], KJT id order
//
// Supported sharding types: data_parallel, table_wise, column_wise, table_column_wise (run as
// column_wise: the shards' ranks are the plan's) and row_wise; table_row_wise is refused at
// construction (InvalidArgument). Table-wise / column-wise shards are grouped by width (the
// sequence all-to-all moves rows of one width): one input dist and one output dist per distinct
// shard width. Row-wise: bucketize with the unbucketize permutation, SequenceEmbeddingsAllToAll
// restores the ids' order. forward equals EmbeddingCollection(configs, seed).forward(kjt) on
// this rank's samples bit for bit (every row is a copy); training equivalence as the bag
// collection (sharded_embedding_bag_collection.h). Stages, errors, state and data-parallel
// steps as there; the state keys are "embeddings.<table>.weight".
#pragma once

#include <ferry/collectives/group.h>
#include <ferry/collectives/torchrec/comm/lazy_awaitable.h>
#include <ferry/collectives/torchrec/modules/embedding_collection.h>
#include <ferry/collectives/torchrec/sharding/embedding_sharding.h>
#include <ferry/collectives/torchrec/sharding/sharded_collection_base.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ferry::torchrec {

// One batch's state between a sequence collection's stages (torchrec's
// EmbeddingCollectionContext): the common part and each feature's lengths, in collection
// feature order (the output's lengths_per_key).
struct EmbeddingCollectionContext : ShardedModuleContext {
  std::vector<Tensor> lengths_per_feature;
};

class ShardedEmbeddingCollection : public ShardedCollectionBase {
 public:
  ShardedEmbeddingCollection(std::vector<EmbeddingConfig> tables, const ModuleShardingPlan& plan,
                             Group world, ShardedEmbeddingOptions options = {},
                             std::optional<FusedOptimizerConfig> fused = std::nullopt,
                             uint64_t seed = 0);

  // A batch's context: fill it with input_dist, hand it to compute_and_output_dist.
  using Context = EmbeddingCollectionContext;
  std::unique_ptr<Context> create_context() const { return std::make_unique<Context>(); }

  ShardedInputDistAwaitable input_dist(Context& ctx, const KeyedJaggedTensor& features) const;
  // input_dist without its own check, for a caller that ran the check's halves
  // (input_check_status, raise_input_check: ShardedCollectionBase).
  ShardedInputDistAwaitable input_dist_checked(Context& ctx,
                                               const KeyedJaggedTensor& features) const;
  LazyAwaitable<SequenceEmbeddings> compute_and_output_dist(
      Context& ctx, const std::vector<KeyedJaggedTensor>& dist_input) const;
  SequenceEmbeddings forward(const KeyedJaggedTensor& features) const;

  const std::vector<EmbeddingConfig>& embedding_configs() const { return configs_; }
  // Shards, data_parallel tables, state dicts ("embeddings.<t>.weight"): ShardedCollectionBase.

 private:
  std::vector<EmbeddingConfig> configs_;
  std::vector<std::shared_ptr<SequenceEmbeddingSharding>> shardings_;
};

}  // namespace ferry::torchrec
