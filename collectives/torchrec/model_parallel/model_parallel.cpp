// DistributedModelParallel: the replicated parameters, their reducer and optimizer, and the
// step over both optimizers.
#include <ferry/collectives/torchrec/model_parallel/model_parallel.h>

#include <ferry/collectives/torchrec/utils/format.h>
#include <ferry/runtime/error.h>

namespace ferry::torchrec {

DistributedModelParallel::DistributedModelParallel(
    std::vector<Variable> dense_parameters,
    std::vector<std::shared_ptr<ShardedModule>> sharded_modules, Group group,
    DenseOptimizerFactory dense_optimizer, DistributedModelParallelOptions options)
    : group_(std::move(group)), modules_(std::move(sharded_modules)),
      replicated_(std::move(dense_parameters)) {
  detail::check_group(group_, "DistributedModelParallel");
  for (size_t i = 0; i < modules_.size(); ++i) {
    FERRY_CHECK(modules_[i] != nullptr, InvalidArgument,
                "DistributedModelParallel: sharded module ", i, " is null");
    for (Variable& p : modules_[i]->data_parallel_parameters()) replicated_.push_back(p);
  }
  if (replicated_.empty()) return;
  FERRY_CHECK(dense_optimizer != nullptr, InvalidArgument,
              "DistributedModelParallel: ", replicated_.size(),
              " replicated parameters but no dense optimizer factory");
  reducer_ = std::make_unique<GradientReducer>(replicated_, group_, options.reducer);
  if (options.broadcast_parameters) reducer_->broadcast_parameters(0);
  dense_optimizer_ = dense_optimizer(replicated_);
  FERRY_CHECK(dense_optimizer_ != nullptr, InvalidArgument,
              "DistributedModelParallel: the dense optimizer factory returned null");
}

DistributedModelParallel::DistributedModelParallel(ShardableModel& model, Group group,
                                                   DenseOptimizerFactory dense_optimizer,
                                                   ModelShardingOptions sharding,
                                                   DistributedModelParallelOptions options)
    : DistributedModelParallel(model.dense_parameters(),
                               detail::shard_collections(model, group, sharding), group,
                               std::move(dense_optimizer), options) {}

DistributedModelParallel::DistributedModelParallel(std::vector<Variable> dense_parameters,
                                                   detail::ShardedCollections sharded,
                                                   Group group,
                                                   DenseOptimizerFactory dense_optimizer,
                                                   DistributedModelParallelOptions options)
    : DistributedModelParallel(std::move(dense_parameters), std::move(sharded.modules),
                               std::move(group), std::move(dense_optimizer), options) {
  plan_ = std::move(sharded.plan);
}

void DistributedModelParallel::step() {
  if (reducer_) {
    if (!reducer_->syncing()) return;
    reducer_->finish();
    dense_optimizer_->step();
  }
  for (auto& module : modules_) module->fused_optimizer_step();
}

void DistributedModelParallel::zero_grad() {
  if (dense_optimizer_) dense_optimizer_->zero_grad();
  for (auto& module : modules_) module->zero_grad();
}

GradientReducer::NoSyncGuard DistributedModelParallel::no_sync() { return reducer().no_sync(); }

GradientReducer& DistributedModelParallel::reducer() {
  FERRY_CHECK(reducer_ != nullptr, InvalidArgument,
              "DistributedModelParallel: the model has no replicated parameters, so no reducer");
  return *reducer_;
}

Optimizer& DistributedModelParallel::dense_optimizer() {
  FERRY_CHECK(dense_optimizer_ != nullptr, InvalidArgument,
              "DistributedModelParallel: the model has no replicated parameters, so no dense "
              "optimizer");
  return *dense_optimizer_;
}

}  // namespace ferry::torchrec
