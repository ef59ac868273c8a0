#include <ferry/collectives/torchrec/model_parallel/shard_model.h>

#include <ferry/collectives/torchrec/comm/topology.h>
#include <ferry/collectives/torchrec/model_parallel/sharded_ebc_module.h>
#include <ferry/collectives/torchrec/planner/planner.h>
#include <ferry/runtime/error.h>

#include <set>

namespace ferry::torchrec::detail {
namespace {

constexpr const char* kWhere = "DistributedModelParallel";

std::string module_list(const std::set<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "\"" : ", \"") + n + "\"";
  return out.empty() ? "none" : out;
}

ShardingPlan plan_of(const std::vector<EmbeddingBagCollectionSlot>& slots, const Group& group,
                     const ModelShardingOptions& options) {
  if (options.plan) return *options.plan;
  Topology topology = options.topology;
  topology.world_size = group.size();
  topology.local_world_size =
      options.sharded.local_size > 0 ? options.sharded.local_size : get_local_size(group);
  if (topology.batch_size < 1) topology.batch_size = 1;
  std::map<std::string, std::vector<PlannerTable>> modules;
  for (const EmbeddingBagCollectionSlot& slot : slots) {
    auto& tables = modules[slot.module_path];
    for (const EmbeddingBagConfig& c : slot.tables) {
      PlannerTable t;
      t.name = c.name;
      t.rows = c.num_embeddings;
      t.dim = c.embedding_dim;
      auto pf = options.pooling_factors.find(c.name);
      t.pooling_factor = pf == options.pooling_factors.end() ? 1.0 : pf->second;
      t.num_features = static_cast<int>(c.feature_names.size());
      tables.push_back(t);
    }
  }
  return EmbeddingShardingPlanner(topology).collective_plan(modules, group);
}

}  // namespace

ShardedCollections shard_collections(ShardableModel& model, const Group& group,
                                     const ModelShardingOptions& options) {
  FERRY_CHECK(group.valid(), InvalidArgument, kWhere, ": the group is null");
  std::vector<EmbeddingBagCollectionSlot> slots = model.embedding_bag_collections();
  std::set<std::string> paths;
  for (const EmbeddingBagCollectionSlot& slot : slots) {
    FERRY_CHECK(paths.insert(slot.module_path).second, InvalidArgument, kWhere, " on rank ",
                group.rank(), ": two embedding bag collections have the module path \"",
                slot.module_path, "\"");
    FERRY_CHECK(slot.install != nullptr, InvalidArgument, kWhere, " on rank ", group.rank(),
                ": the slot \"", slot.module_path, "\" has no install callback");
  }
  ShardedCollections out;
  out.plan = plan_of(slots, group, options);
  std::set<std::string> planned;
  for (const auto& [path, module_plan] : out.plan.plan()) planned.insert(path);
  FERRY_CHECK(planned == paths, InvalidArgument, kWhere, " on rank ", group.rank(),
              ": the plan holds the modules ", module_list(planned), ", the model has ",
              module_list(paths), "; a plan must hold exactly the model's collections");
  for (const EmbeddingBagCollectionSlot& slot : slots) {
    auto sharded = std::make_shared<ShardedEmbeddingBagCollection>(
        slot.tables, slot.is_weighted, *out.plan.get_plan_for_module(slot.module_path), group,
        options.sharded, options.fused, slot.seed);
    slot.install(sharded);
    out.modules.push_back(std::make_shared<ShardedEbcModule>(sharded, slot.module_path));
  }
  return out;
}

}  // namespace ferry::torchrec::detail
