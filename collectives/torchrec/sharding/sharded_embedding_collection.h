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
#include <ferry/collectives/torchrec/sharding/sharded_embedding_bag_collection.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ferry::torchrec {

class ShardedEmbeddingCollection {
 public:
  ShardedEmbeddingCollection(std::vector<EmbeddingConfig> tables, const ModuleShardingPlan& plan,
                             Group world, ShardedEmbeddingOptions options = {},
                             std::optional<FusedOptimizerConfig> fused = std::nullopt,
                             uint64_t seed = 0);

  ShardedInputDistAwaitable input_dist(ShardedEmbeddingContext& ctx,
                                       const KeyedJaggedTensor& features) const;
  // The collective input check with its exchange left to the caller (a train pipeline carries
  // the words on its agreement on the next batch), as ShardedEmbeddingBagCollection's.
  detail::InputCheckStatus input_check_status(const KeyedJaggedTensor& features) const;
  void raise_input_check(const std::vector<int64_t>& all_words,
                         const detail::InputCheckStatus& mine) const;
  ShardedInputDistAwaitable input_dist_checked(ShardedEmbeddingContext& ctx,
                                               const KeyedJaggedTensor& features) const;
  LazyAwaitable<SequenceEmbeddings> compute_and_output_dist(
      ShardedEmbeddingContext& ctx, const std::vector<KeyedJaggedTensor>& dist_input) const;
  SequenceEmbeddings forward(const KeyedJaggedTensor& features) const;

  const std::vector<EmbeddingConfig>& embedding_configs() const { return configs_; }
  const std::vector<std::string>& feature_names() const { return tables_.features(); }
  const Group& world() const { return tables_.world(); }
  const ModuleShardingPlan& plan() const { return plan_; }

  std::map<std::string, std::vector<std::shared_ptr<EmbeddingTable>>> local_tables() const;
  std::vector<std::shared_ptr<EmbeddingTable>> data_parallel_tables() const;
  void reduce_data_parallel_gradients() const;
  void step_data_parallel();

  std::map<std::string, Tensor> state_dict() const;  // collective; "embeddings.<t>.weight"
  std::map<std::string, std::vector<LocalShard>> local_state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state);
  // The fused optimizers' state as whole tables (collective) and back into any plan and world
  // size (local): see ShardedTables::optimizer_state_dict in sharded_tables.h for the keys.
  std::map<std::string, Tensor> optimizer_state_dict() const;
  void load_optimizer_state_dict(const std::map<std::string, Tensor>& state);

 private:
  std::vector<EmbeddingConfig> configs_;
  ModuleShardingPlan plan_;
  detail::ShardedTables tables_;
  std::vector<std::shared_ptr<SequenceEmbeddingSharding>> shardings_;
};

}  // namespace ferry::torchrec
