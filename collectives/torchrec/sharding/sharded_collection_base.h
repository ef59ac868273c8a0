// ferry::torchrec::ShardedCollectionBase: what ShardedEmbeddingBagCollection and
// ShardedEmbeddingCollection share (torchrec's ShardedEmbeddingModule): the shards of their
// tables and the plan that placed them, the collective input check, the state dicts and the
// data_parallel tables' averaging and stepping. Each collection adds its own input dist,
// lookups and output assembly.
#pragma once

#include <ferry/collectives/group.h>
#include <ferry/collectives/torchrec/sharding/data_parallel_tables.h>
#include <ferry/collectives/torchrec/sharding/embedding_sharding.h>
#include <ferry/collectives/torchrec/sharding/sharded_input_check.h>
#include <ferry/collectives/torchrec/sharding/sharded_state_dict.h>
#include <ferry/collectives/torchrec/sharding/sharded_tables.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ferry::torchrec {

// One batch's state between a sharded module's stages, the part every kind of module has
// (torchrec's ShardedModuleContext, the base of EmbeddingBagCollectionContext and
// EmbeddingCollectionContext): the batch size and each sharding group's context. Each
// collection's own kind adds what only it needs; make one with the collection's
// create_context() (or as the collection's Context type), fill it with input_dist, pass it on
// unchanged.
struct ShardedModuleContext {
  virtual ~ShardedModuleContext() = default;
  int64_t batch_size = 0;
  // Each made by its sharding, in the collection's sharding-group order.
  std::vector<std::shared_ptr<EmbeddingShardingContext>> sharding_contexts;
};

// What input_dist returns: the outer wait finishes phase 1 of every group's input dist (and
// issues phase 2); the inner wait gives one KJT per sharding group.
using ShardedInputDistAwaitable = Awaitable<Awaitable<std::vector<KeyedJaggedTensor>>>;

class ShardedCollectionBase {
 public:
  const Group& world() const { return tables_.world(); }
  const ModuleShardingPlan& plan() const { return plan_; }
  // The output's keys: the features in config order.
  const std::vector<std::string>& feature_names() const { return tables_.features(); }

  // The collective input check with its exchange left to the caller (a train pipeline carries
  // the words on its agreement on the next batch): this rank's status words
  // (detail::InputCheckStatus::kWords of them; zeros when options.check_inputs is off), then
  // the verdict over every rank's words in rank order, which throws the same InvalidArgument on
  // every rank when any rank's batch is bad. The collection's input_dist_checked is then its
  // input_dist without its own check (and without per-sample weights).
  detail::InputCheckStatus input_check_status(const KeyedJaggedTensor& features) const;
  void raise_input_check(const std::vector<int64_t>& all_words,
                         const detail::InputCheckStatus& mine) const;

  // This rank's shards: table name -> its EmbeddingTables (shard order of the plan).
  std::map<std::string, std::vector<std::shared_ptr<EmbeddingTable>>> local_tables() const;
  // data_parallel tables (every rank holds them whole): their weights are the parameters a DDP
  // reducer would average; their sparse gradients are averaged by
  // reduce_data_parallel_gradients() (collective) and stepped by step_data_parallel()
  // (collective; InvalidArgument without a fused config).
  std::vector<std::shared_ptr<EmbeddingTable>> data_parallel_tables() const;
  bool has_data_parallel_tables() const;
  std::vector<Variable> data_parallel_parameters() const;
  void reduce_data_parallel_gradients() const;
  void step_data_parallel();

  // Full tables gathered on every rank (collective), "<prefix>.<table>.weight" with torchrec's
  // prefixes ("embedding_bags", "embeddings").
  std::map<std::string, Tensor> state_dict() const;
  // This rank's shards with offsets (local).
  std::map<std::string, std::vector<LocalShard>> local_state_dict() const;
  // A full-table state (the unsharded collection's state_dict or state_dict() above, from any
  // plan and world size) cut into this rank's shards (local).
  void load_state_dict(const std::map<std::string, Tensor>& state);
  // The fused optimizers' state as whole tables (collective) and back into any plan and world
  // size (local): see sharded_state_dict.h for the keys.
  std::map<std::string, Tensor> optimizer_state_dict() const;
  void load_optimizer_state_dict(const std::map<std::string, Tensor>& state);

 protected:
  // Collective over `world` (plan agreement). `name` names the collection in messages,
  // `state_prefix` its state keys; `weighted` and `allow_vbe` are what its input check accepts.
  ShardedCollectionBase(std::vector<EmbeddingBagConfig> tables, const ModuleShardingPlan& plan,
                        Group world, ShardedEmbeddingOptions options,
                        std::optional<FusedOptimizerConfig> fused, uint64_t seed, bool weighted,
                        bool allow_vbe, const char* name, const char* state_prefix);
  ~ShardedCollectionBase() = default;

  // The collective input check of input_dist (detail::check_input).
  void check_input(const KeyedJaggedTensor& features, const Variable& weights = Variable()) const;
  // InvalidArgument naming `op` unless compute_and_output_dist got one KJT and one context per
  // sharding group (what input_dist filled).
  void check_dist_input(const ShardedModuleContext& ctx,
                        const std::vector<KeyedJaggedTensor>& dist_input, size_t groups,
                        const char* op) const;
  const detail::ShardedTables& sharded_tables() const { return tables_; }
  // "<name>::input_dist", the op the input check's messages name.
  const char* input_dist_op() const { return input_dist_op_.c_str(); }

 private:
  ModuleShardingPlan plan_;
  detail::ShardedTables tables_;
  detail::DataParallelOptimizers dp_optimizers_;
  bool weighted_ = false, allow_vbe_ = false;
  std::string input_dist_op_;
};

}  // namespace ferry::torchrec
