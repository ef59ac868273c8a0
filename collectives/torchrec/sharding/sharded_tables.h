// ferry::torchrec sharded embedding tables: what a sharded collection holds on one rank -- its
// shards of every table, cut from the same deterministic initial tables as the unsharded
// collection -- with the plan and the options they were built by. The roles around this storage
// live one per file: the collective input check (sharded_input_check.h), the state dicts
// (sharded_state_dict.h), the data_parallel tables' averaging and stepping
// (data_parallel_tables.h); ShardedCollectionBase (sharded_collection_base.h) puts them together
// for the two sharded collections.
//
// ShardedTables(configs, plan, world, options, fused, seed) validates the plan against the
// tables (validate_module_plan: a missing table, an extra table, a rank outside the world, shards
// that do not tile), checks once, collectively, that every rank holds the same plan
// (check_plan_agreement) and builds this rank's shards:
//   data_parallel          the whole table (every rank), never fused: its sparse gradient is
//                          accumulated and averaged by reduce_data_parallel_gradients()
//   other types            one EmbeddingTable per shard placed on this rank (TableShard offsets),
//                          cut from init_table_weight(config, seed), so sharded == unsharded;
//                          kernel FUSED with a fused config: the optimizer runs in backward;
//                          kernel DENSE: the sparse gradient accumulates (step by hand)
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/group.h>
#include <ferry/collectives/torchrec/comm/comm_ops.h>
#include <ferry/collectives/torchrec/modules/embedding_config.h>
#include <ferry/collectives/torchrec/modules/embedding_table.h>
#include <ferry/collectives/torchrec/modules/fused_optimizer.h>
#include <ferry/collectives/torchrec/planner/types.h>
#include <ferry/collectives/torchrec/sharding/sharded_embedding_options.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ferry::torchrec {

namespace detail {

// A table of the collection with its plan and this rank's shards.
struct ShardedTable {
  EmbeddingBagConfig config;   // EmbeddingConfig tables as bag configs (pooling unused)
  int index = 0;               // position in the config list
  ParameterSharding sharding;  // its plan entry
  // This rank's shards (data_parallel: one shard, the whole table), sharding_spec order.
  std::vector<ShardMetadata> shards;
  std::vector<std::shared_ptr<EmbeddingTable>> tables;
};

class ShardedTables {
 public:
  ShardedTables(std::vector<EmbeddingBagConfig> configs, const ModuleShardingPlan& plan,
                Group world, ShardedEmbeddingOptions options,
                std::optional<FusedOptimizerConfig> fused, uint64_t seed, const char* where,
                const char* state_prefix);

  const Group& world() const { return world_; }
  int local_size() const { return local_size_; }
  const ShardedEmbeddingOptions& options() const { return options_; }
  const std::vector<ShardedTable>& tables() const { return tables_; }
  // Feature names in config order, their table index, and each feature's dim.
  const std::vector<std::string>& features() const { return features_; }
  const std::vector<int>& feature_table() const { return feature_table_; }
  const std::vector<int64_t>& feature_dims() const { return feature_dims_; }
  // The codecs of the output dists (from options.qcomms_config).
  const Codecs& codecs() const { return codecs_; }

  const std::optional<FusedOptimizerConfig>& fused() const { return fused_; }
  // The collection's name for messages ("ShardedEmbeddingBagCollection") and its state keys'
  // prefix ("embedding_bags").
  const std::string& name() const { return where_; }
  const std::string& state_prefix() const { return prefix_; }

 private:
  Group world_;
  int local_size_ = 1;
  ShardedEmbeddingOptions options_;
  std::optional<FusedOptimizerConfig> fused_;
  std::string where_, prefix_;
  std::vector<ShardedTable> tables_;
  std::vector<std::string> features_;
  std::vector<int> feature_table_;
  std::vector<int64_t> feature_dims_;
  Codecs codecs_;
};

// The block of `full` (a whole table) that shard `m` holds, as a new contiguous tensor.
Tensor cut_shard(const Tensor& full, const ShardMetadata& m);

}  // namespace detail
}  // namespace ferry::torchrec
