#include <ferry/collectives/torchrec/sharding/sharded_collection_base.h>

#include <ferry/runtime/error.h>

namespace ferry::torchrec {

ShardedCollectionBase::ShardedCollectionBase(std::vector<EmbeddingBagConfig> tables,
                                             const ModuleShardingPlan& plan, Group world,
                                             ShardedEmbeddingOptions options,
                                             std::optional<FusedOptimizerConfig> fused,
                                             uint64_t seed, bool weighted, bool allow_vbe,
                                             const char* name, const char* state_prefix)
    : plan_(plan),
      tables_(std::move(tables), plan, std::move(world), options, fused, seed, name,
              state_prefix),
      weighted_(weighted),
      allow_vbe_(allow_vbe),
      input_dist_op_(std::string(name) + "::input_dist") {}

detail::InputCheckStatus ShardedCollectionBase::input_check_status(
    const KeyedJaggedTensor& features) const {
  if (!tables_.options().check_inputs)
    return {std::vector<int64_t>(detail::InputCheckStatus::kWords, 0), ""};
  return detail::input_status(tables_, features, weighted_, Variable(), allow_vbe_,
                              input_dist_op());
}

void ShardedCollectionBase::raise_input_check(const std::vector<int64_t>& all_words,
                                              const detail::InputCheckStatus& mine) const {
  detail::raise_input_status(tables_, all_words, mine, input_dist_op());
}

void ShardedCollectionBase::check_input(const KeyedJaggedTensor& features,
                                        const Variable& weights) const {
  detail::check_input(tables_, features, weighted_, input_dist_op(), weights, allow_vbe_);
}

void ShardedCollectionBase::check_dist_input(const ShardedModuleContext& ctx,
                                             const std::vector<KeyedJaggedTensor>& dist_input,
                                             size_t groups, const char* op) const {
  FERRY_CHECK(dist_input.size() == groups && ctx.sharding_contexts.size() == groups,
              InvalidArgument, op, ": expected the input dist's result (", groups, " KJTs) and its context, got ",
              dist_input.size());
}

std::map<std::string, std::vector<std::shared_ptr<EmbeddingTable>>>
ShardedCollectionBase::local_tables() const {
  std::map<std::string, std::vector<std::shared_ptr<EmbeddingTable>>> out;
  for (const auto& t : tables_.tables()) out[t.config.name] = t.tables;
  return out;
}

std::vector<std::shared_ptr<EmbeddingTable>> ShardedCollectionBase::data_parallel_tables() const {
  return detail::data_parallel_tables(tables_);
}

bool ShardedCollectionBase::has_data_parallel_tables() const {
  return detail::has_data_parallel_tables(tables_);
}

std::vector<Variable> ShardedCollectionBase::data_parallel_parameters() const {
  std::vector<Variable> out;
  for (const auto& t : data_parallel_tables()) out.push_back(t->weight());
  return out;
}

void ShardedCollectionBase::reduce_data_parallel_gradients() const {
  detail::reduce_data_parallel_gradients(tables_);
}

void ShardedCollectionBase::step_data_parallel() { dp_optimizers_.step(tables_); }

std::map<std::string, Tensor> ShardedCollectionBase::state_dict() const {
  return detail::state_dict(tables_);
}

std::map<std::string, std::vector<LocalShard>> ShardedCollectionBase::local_state_dict() const {
  return detail::local_state_dict(tables_);
}

void ShardedCollectionBase::load_state_dict(const std::map<std::string, Tensor>& state) {
  detail::load_state_dict(tables_, state);
}

std::map<std::string, Tensor> ShardedCollectionBase::optimizer_state_dict() const {
  return detail::optimizer_state_dict(tables_, dp_optimizers_);
}

void ShardedCollectionBase::load_optimizer_state_dict(const std::map<std::string, Tensor>& state) {
  detail::load_optimizer_state_dict(tables_, dp_optimizers_, state);
}

}  // namespace ferry::torchrec
