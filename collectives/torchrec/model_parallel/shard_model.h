// Sharding a model inside DistributedModelParallel (torchrec's DistributedModelParallel(module,
// env, plan=None, sharders)): the wrapper finds the model's embedding bag collections and
// embedding collections, plans them together (or takes the caller's plan), builds each
// ShardedEmbeddingBagCollection / ShardedEmbeddingCollection and hands it back to the model,
// then wraps the dense part as usual.
//
// C++ has no module tree to walk and swap children in, so a model says what to shard through
// ShardableModel: its dense parameters and one slot per collection (the plan's module path,
// the tables, and a callback that installs the sharded collection where the model will call
// it).
//
//   struct MyModel : ShardableModel {
//     std::shared_ptr<ShardedEmbeddingBagCollection> ebc;  // installed by the wrapper
//     Mlp top;
//     std::vector<Variable> dense_parameters() override { return top.parameters(); }
//     std::vector<EmbeddingBagCollectionSlot> embedding_bag_collections() override {
//       return {{.module_path = "sparse.ebc", .tables = configs, .seed = 1,
//                .install = [this](auto s) { ebc = std::move(s); }}};
//     }
//   };
//   MyModel model;
//   DistributedModelParallel dmp(model, world, dense_optimizer_factory,
//                                {.fused = FusedOptimizerConfig{.learning_rate = 0.1}});
//   // model.ebc is sharded by the planner's plan (dmp.plan()), printed with format_plan.
//
// Sequence embeddings (EmbeddingCollection) come through embedding_collections() the same way
// (EmbeddingCollectionSlot). One plan covers both kinds, module paths unique across them. The
// planner never proposes table_row_wise for a sequence table (ShardedEmbeddingCollection does not
// support it; torchrec has no table_row_wise sequence sharding either) and plans its ids with a
// pooling factor of 1 (one output row per id) unless `pooling_factors` says otherwise; a
// caller's plan with table_row_wise for a sequence table is refused by the collection's
// constructor (InvalidArgument, on every rank).
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/group.h>
#include <ferry/collectives/torchrec/modules/embedding_config.h>
#include <ferry/collectives/torchrec/modules/fused_optimizer.h>
#include <ferry/collectives/torchrec/planner/cost_model.h>
#include <ferry/collectives/torchrec/planner/types.h>
#include <ferry/collectives/torchrec/sharding/sharded_embedding_options.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ferry::torchrec {

class ShardedEmbeddingBagCollection;
class ShardedEmbeddingCollection;
class ShardedModule;

// One embedding bag collection of a model, to be sharded.
struct EmbeddingBagCollectionSlot {
  std::string module_path;  // its key in the ShardingPlan ("sparse.ebc"); unique in the model
  std::vector<EmbeddingBagConfig> tables;
  bool is_weighted = false;
  // The initial tables: those of EmbeddingBagCollection(tables, is_weighted, seed), so the
  // sharded model starts where the unsharded one would.
  uint64_t seed = 0;
  // Receives the sharded collection (called once, on every rank, before the wrapper's
  // constructor returns).
  std::function<void(std::shared_ptr<ShardedEmbeddingBagCollection>)> install;
};

// One embedding collection (sequence embeddings) of a model, to be sharded.
struct EmbeddingCollectionSlot {
  std::string module_path;  // its key in the ShardingPlan ("sparse.ec"); unique in the model
  std::vector<EmbeddingConfig> tables;
  // The initial tables: those of EmbeddingCollection(tables, seed).
  uint64_t seed = 0;
  // Receives the sharded collection (called once, on every rank, before the wrapper's
  // constructor returns).
  std::function<void(std::shared_ptr<ShardedEmbeddingCollection>)> install;
};

// What DistributedModelParallel needs to shard a model.
class ShardableModel {
 public:
  virtual ~ShardableModel() = default;
  // The replicated parameters (leaf Variables requiring grad, the same on every rank).
  virtual std::vector<Variable> dense_parameters() = 0;
  virtual std::vector<EmbeddingBagCollectionSlot> embedding_bag_collections() = 0;
  // The model's embedding collections (none by default). Sharded after the bag collections.
  virtual std::vector<EmbeddingCollectionSlot> embedding_collections() { return {}; }
};

struct ModelShardingOptions {
  // The plan to shard by (one module per slot). None: the planner's, computed on rank 0 and
  // broadcast (EmbeddingShardingPlanner::collective_plan) with `topology`.
  std::optional<ShardingPlan> plan;
  // For the planner: world_size is the group's and local_world_size the sharded options'
  // local_size (or the launcher's, get_local_size) whatever is set here; the rest (batch size,
  // memory budget, bandwidths) as given.
  Topology topology;
  // Expected ids per bag of each table, by table name, for the planner (default 1).
  std::map<std::string, double> pooling_factors;
  // Local size, input checks, codecs and bounds checks of every sharded collection.
  ShardedEmbeddingOptions sharded;
  // The fused optimizer of the sharded tables (none: DENSE row gradients).
  std::optional<FusedOptimizerConfig> fused;
};

namespace detail {

struct ShardedCollections {
  ShardingPlan plan;
  // One ShardedEbcModule per bag slot, then one ShardedEcModule per sequence slot.
  std::vector<std::shared_ptr<ShardedModule>> modules;
};

// Plans (unless given), validates the plan against the slots (InvalidArgument naming a module
// the plan lacks or has in excess), builds and installs each collection (bag slots first, in
// the model's order, then sequence slots). Collective over
// `group` (planner broadcast, each collection's plan agreement).
ShardedCollections shard_collections(ShardableModel& model, const Group& group,
                                     const ModelShardingOptions& options);

}  // namespace detail
}  // namespace ferry::torchrec
