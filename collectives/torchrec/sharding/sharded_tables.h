// ferry::torchrec sharded embedding tables: what a sharded collection holds on one rank (its shards
// of every table, cut from the same deterministic initial tables as the unsharded collection), the
// options shared by ShardedEmbeddingBagCollection and ShardedEmbeddingCollection, the collective
// input check and the state (full tables or local shards).
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
#include <ferry/collectives/torchrec/comm/fbgemm_qcomm_codec.h>
#include <ferry/collectives/torchrec/modules/embedding_config.h>
#include <ferry/collectives/torchrec/modules/embedding_table.h>
#include <ferry/collectives/torchrec/modules/fused_optimizer.h>
#include <ferry/collectives/torchrec/planner/types.h>
#include <ferry/collectives/torchrec/sparse/keyed_jagged_tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ferry::torchrec {

// The environment of a sharded collection (torchrec's ShardingEnv + the sharder's options).
struct ShardedEmbeddingOptions {
  // Ranks per node for table_row_wise / table_column_wise (0: get_local_size(world)). Must
  // divide the world size. Used for plan validation and the intra/cross-node groups.
  int local_size = 0;
  // Before any payload moves, every rank checks its own KJT (configured features present, ids in
  // [0, num_embeddings), weights present when weighted) and the ranks exchange the outcome (5
  // int64 per rank: input_dist's own all_gather, or, in the train pipelines, the agreement on
  // the next batch that they issue anyway), so a bad batch raises the same InvalidArgument,
  // naming the rank, table, feature, sample and id, on EVERY rank and the group stays usable. Off: the
  // owning rank's lookup raises (BoundsCheckMode::Fatal) and its peers see the failure as a
  // peer failure / timeout.
  bool check_inputs = true;
  // Codecs of the embedding output dists (comm ops) from a QCommsConfig (std::nullopt: none).
  std::optional<QCommsConfig> qcomms_config{};
  // Per-table bounds handling of the lookups (fbgemm's modes; see embedding_table.h).
  BoundsCheckMode bounds_check_mode = BoundsCheckMode::Fatal;
};

// One shard of a table stored on this rank, with its place in the table.
struct LocalShard {
  ShardMetadata metadata;  // offsets, sizes, placement (this rank)
  Tensor tensor;           // the shard's weight (shares the table's storage)
};

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

// One rank's half of the collective input check: the words every rank's verdict needs
// (InputCheckStatus::kWords of them: {code, feature, sample, id, weights require grad}) and the
// text of an error only this rank can describe in full.
struct InputCheckStatus {
  static constexpr int kWords = 5;
  std::vector<int64_t> words;
  std::string vbe_error;
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

  // The collective input check (options.check_inputs; W = 1: local only). Throws
  // InvalidArgument on every rank when any rank's KJT is bad, or its `weights` (the caller's
  // per-sample weights Variable, if given) do not match the KJT's weights (dtype, one per value;
  // only a weighted collection takes them), or the ranks disagree on whether the weights require
  // grad (their gradient goes back through a collective: all ranks or none).
  // allow_vbe: a variable stride per key is accepted (pooled collections, every sharding type);
  // it then needs valid inverse_indices. Otherwise VBE is refused.
  void check_input(const KeyedJaggedTensor& kjt, bool weighted, const char* where,
                   const Variable& weights = Variable(), bool allow_vbe = false) const;
  // The check's two halves, for a caller that carries the words on a collective it issues
  // anyway (the train pipelines' agreement on the next batch): this rank's status, then the
  // verdict over every rank's words in rank order (the same InvalidArgument on every rank).
  InputCheckStatus input_status(const KeyedJaggedTensor& kjt, bool weighted,
                                const Variable& weights, bool allow_vbe,
                                const char* where) const;
  void raise_input_status(const std::vector<int64_t>& all, const InputCheckStatus& mine,
                          const char* where) const;

  // Full tables "<prefix>.<table>.weight", gathered (collective: every rank calls it).
  std::map<std::string, Tensor> state_dict() const;
  // This rank's shards "<prefix>.<table>.weight" -> its shards with offsets (local).
  std::map<std::string, std::vector<LocalShard>> local_state_dict() const;
  // Copies each full table of `state` into this rank's shards (local; every table present with
  // its [rows, dim] shape). The fused optimizers' state is kept.
  void load_state_dict(const std::map<std::string, Tensor>& state);

  // The fused optimizers' state as whole tables (collective: every rank calls it), for each
  // table whose optimizer keeps state; "<prefix>.<table>.weight." followed by:
  //   "step"        int64 [1], the table's step count;
  //   "momentum1"   element-wise state (EXACT_ADAGRAD, ADAM's m): [rows, dim]; row-wise state
  //                 (EXACT_ROWWISE_ADAGRAD): [rows, k], one column per column block of the
  //                 plan (k = 1 unless the table is split by columns: each column shard keeps
  //                 its own row state), with "momentum1.col_offsets" int64 [k], their first
  //                 columns;
  //   "momentum2"   ADAM's v, [rows, dim].
  // data_parallel tables contribute the state of their optimizer once it has stepped.
  // Empty without a fused config. sharded_optimizer_state.cpp.
  std::map<std::string, Tensor> optimizer_state_dict() const;
  // Cuts a state optimizer_state_dict() made (any plan, any world size) into this rank's
  // optimizers (local). Row-wise state moves only between identical column blocks (a row's
  // state of two blocks cannot be split or merged exactly): InvalidArgument otherwise, and
  // for a missing key or a wrong shape.
  void load_optimizer_state_dict(const std::map<std::string, Tensor>& state);

  // data_parallel tables: this rank's copies, and the collective average of their accumulated
  // sparse gradients (sum over ranks / W of the dense gradients; rows touched on any rank stay
  // touched), left as each table's sparse_grad().
  std::vector<std::shared_ptr<EmbeddingTable>> data_parallel_tables() const;
  void reduce_data_parallel_gradients() const;
  // reduce_data_parallel_gradients, then steps each data_parallel table with its own
  // SparseOptimizer of the collection's fused config (the "dense optimizer path" of
  // data-parallel tables). Throws when the collection has no fused config.
  void step_data_parallel();

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
  std::map<std::string, SparseOptimizer> dp_optimizers_;
};

}  // namespace detail
}  // namespace ferry::torchrec
