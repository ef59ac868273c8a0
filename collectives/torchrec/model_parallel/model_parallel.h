// DistributedModelParallel: a model whose embedding collections are sharded across the ranks and
// whose dense part is replicated on every rank (torchrec's DistributedModelParallel).
//
// Built from a ShardableModel (shard_model.h), it plans the model's embedding bag collections
// (or takes the caller's plan), shards them and installs the sharded collections in the model;
// built from sharded modules, it wraps what the caller sharded. It does not run the model's
// forward: the model calls its sharded modules and dense layers itself. What it owns is the
// training step around it:
//   - the replicated parameters (the dense ones, then every sharded module's data-parallel
//     ones, in that order) are checked to agree across ranks and broadcast from rank 0 at
//     construction;
//   - their gradients are averaged by a GradientReducer (collectives/ddp/gradient_reducer.h):
//     bucketed asynchronous all_reduces launched during backward;
//   - step() finishes the reduction, steps the dense optimizer over the replicated parameters,
//     then asks every sharded module to step its own (fused) optimizer.
// With the sharded modules' gradient division (torchrec's GRADIENT_DIVISION, on by default) and
// the reducer's average, one step equals a single process training on the concatenated global
// batch with the mean loss, each rank's loss being the mean over its own samples
// (docs/torchrec/training.md, sharded embedding collections).
//
//   DistributedModelParallel dmp(dense_params, {sharded_ebc}, world,
//       [](std::vector<Variable> p) { return std::make_unique<Sgd>(std::move(p), SgdOptions{}); });
//   loss(model, batch).backward();
//   dmp.step();
//   dmp.zero_grad();
#pragma once

#include <ferry/autograd/optimizer.h>
#include <ferry/autograd/variable.h>
#include <ferry/collectives/ddp/gradient_reducer.h>
#include <ferry/collectives/group.h>
#include <ferry/collectives/torchrec/model_parallel/shard_model.h>
#include <ferry/collectives/torchrec/planner/types.h>
#include <ferry/runtime/awaitable.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ferry::torchrec {

// What DistributedModelParallel needs from a sharded module (a ShardedEmbeddingBagCollection,
// a ShardedEmbeddingCollection, or anything else split across the ranks). Every method is
// called on every rank of the group, in the same order.
class ShardedModule {
 public:
  virtual ~ShardedModule() = default;

  // For messages ("ebc", "sparse.arch").
  virtual std::string name() const = 0;

  // The module's replicated parameters: the weights of its data_parallel tables (and any other
  // parameter it holds identically on every rank). They must be leaf Variables requiring grad,
  // of the same dtypes and shapes in the same order on every rank. DistributedModelParallel
  // broadcasts them from rank 0, averages their gradients with the dense ones (so the module
  // must NOT divide their gradients itself) and steps them with the dense optimizer. Sharded
  // tables (table/column/row-wise) are not listed: their gradients are complete on their owner
  // after the output dist's backward. Called once, at construction.
  virtual std::vector<Variable> data_parallel_parameters() = 0;

  // The step of the module's own optimizer over its sharded tables, called by
  // DistributedModelParallel::step() after the dense step. A fused optimizer that already
  // updated the touched rows inside backward (fbgemm style) has nothing left to do here; a
  // non-fused one applies the accumulated row gradients now. May run collectives (every rank
  // calls it).
  virtual void fused_optimizer_step() = 0;

  // Drops accumulated gradients of the sharded tables (called by zero_grad()). The replicated
  // parameters' gradients are dropped by the dense optimizer.
  virtual void zero_grad() {}
};

// The pipeline stages of a sharded module's forward, for the modules that offer them (a train
// pipeline overlaps the input dist of batch i+1 with the compute of batch i):
//   input_dist: starts moving the features to the ranks that own their tables (the KJT
//               all-to-all) and returns at once;
//   compute_and_output_dist: the local lookups, then starts the output dist (pooled
//               all-to-all or reduce-scatter) and returns at once;
//   forward: both, waited.
// For a ShardedEmbeddingBagCollection: Input = KeyedJaggedTensor, Output = KeyedTensor,
// DistInput = the per-sharding KJTs the input dist delivered.
template <class Input, class DistInput, class Output>
class ShardedModuleStages : public ShardedModule {
 public:
  virtual Awaitable<DistInput> input_dist(const Input& input) = 0;
  virtual Awaitable<Output> compute_and_output_dist(DistInput dist_input) = 0;
  Output forward(const Input& input) {
    return compute_and_output_dist(input_dist(input).wait()).wait();
  }
};

struct DistributedModelParallelOptions {
  // Buckets, reduce op and unused-parameter handling of the replicated gradients.
  GradientReducerOptions reducer;
  // Broadcast the replicated parameters from rank 0 at construction (off: the caller made them
  // identical, e.g. loaded from one checkpoint).
  bool broadcast_parameters = true;
};

class DistributedModelParallel {
 public:
  // Makes the dense optimizer over the replicated parameters.
  using DenseOptimizerFactory =
      std::function<std::unique_ptr<Optimizer>(std::vector<Variable> parameters)>;

  // Collective (the reducer's agreement check, then the broadcast). Throws InvalidArgument for
  // a null module or factory (and whatever GradientReducer throws: MismatchError when ranks
  // disagree on the replicated parameters). A model without replicated parameters gets no
  // reducer and no dense optimizer.
  DistributedModelParallel(std::vector<Variable> dense_parameters,
                           std::vector<std::shared_ptr<ShardedModule>> sharded_modules,
                           Group group, DenseOptimizerFactory dense_optimizer,
                           DistributedModelParallelOptions options = {});

  // Shards `model`'s embedding bag collections (detail::shard_collections: the planner's plan
  // unless `sharding.plan` is set; each collection installed in the model through its slot),
  // then as above with the model's dense parameters. Collective over `group`.
  DistributedModelParallel(ShardableModel& model, Group group,
                           DenseOptimizerFactory dense_optimizer,
                           ModelShardingOptions sharding = {},
                           DistributedModelParallelOptions options = {});

  // Collective, after backward: the reducer's finish(), the dense optimizer's step, then every
  // module's fused_optimizer_step() in order. Inside no_sync() nothing is stepped (the gradients
  // keep accumulating).
  void step();
  // The dense optimizer's zero_grad and every module's.
  void zero_grad();
  // Gradient accumulation: see GradientReducer::no_sync.
  [[nodiscard]] GradientReducer::NoSyncGuard no_sync();

  // Dense parameters, then each module's data-parallel ones.
  const std::vector<Variable>& replicated_parameters() const { return replicated_; }
  const std::vector<std::shared_ptr<ShardedModule>>& sharded_modules() const { return modules_; }
  // Throw InvalidArgument when there are no replicated parameters.
  GradientReducer& reducer();
  Optimizer& dense_optimizer();
  const Group& group() const { return group_; }
  // The plan the model was sharded by (empty when built from sharded modules).
  const ShardingPlan& plan() const { return plan_; }

 private:
  DistributedModelParallel(std::vector<Variable> dense_parameters,
                           detail::ShardedCollections sharded, Group group,
                           DenseOptimizerFactory dense_optimizer,
                           DistributedModelParallelOptions options);

  Group group_;
  std::vector<std::shared_ptr<ShardedModule>> modules_;
  std::vector<Variable> replicated_;
  std::unique_ptr<GradientReducer> reducer_;
  std::unique_ptr<Optimizer> dense_optimizer_;
  ShardingPlan plan_;
};

}  // namespace ferry::torchrec
