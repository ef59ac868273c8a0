#include <ferry/collectives/torchrec/model_parallel/shard_model.h>

#include <ferry/collectives/torchrec/model_parallel/sharded_collection_module.h>
#include <ferry/collectives/torchrec/planner/planner.h>
#include <ferry/collectives/torchrec/utils/format.h>
#include <ferry/collectives/torchrec/utils/topology.h>
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

// A table as the planner sees it; `types` restricts the sharding types (empty: all six).
PlannerTable planner_table(const std::string& name, int64_t rows, int64_t dim, size_t features,
                           const ModelShardingOptions& options, std::vector<ShardingType> types) {
  PlannerTable t;
  t.name = name;
  t.rows = rows;
  t.dim = dim;
  auto pf = options.pooling_factors.find(name);
  t.pooling_factor = pf == options.pooling_factors.end() ? 1.0 : pf->second;
  t.num_features = static_cast<int>(features);
  t.constraints.sharding_types = std::move(types);
  return t;
}

ShardingPlan plan_of(const std::vector<EmbeddingBagCollectionSlot>& bags,
                     const std::vector<EmbeddingCollectionSlot>& sequences, const Group& group,
                     const ModelShardingOptions& options) {
  if (options.plan) return *options.plan;
  Topology topology = options.topology;
  topology.world_size = group.size();
  topology.local_world_size =
      options.sharded.local_size > 0 ? options.sharded.local_size : get_local_size(group);
  if (topology.batch_size < 1) topology.batch_size = 1;
  std::map<std::string, std::vector<PlannerTable>> modules;
  for (const EmbeddingBagCollectionSlot& slot : bags)
    for (const EmbeddingBagConfig& c : slot.tables)
      modules[slot.module_path].push_back(planner_table(
          c.name, c.num_embeddings, c.embedding_dim, c.feature_names.size(), options, {}));
  // Every type but table_row_wise, which ShardedEmbeddingCollection refuses.
  const std::vector<ShardingType> sequence_types{
      ShardingType::DATA_PARALLEL, ShardingType::TABLE_WISE, ShardingType::COLUMN_WISE,
      ShardingType::TABLE_COLUMN_WISE, ShardingType::ROW_WISE};
  for (const EmbeddingCollectionSlot& slot : sequences)
    for (const EmbeddingConfig& c : slot.tables)
      modules[slot.module_path].push_back(planner_table(c.name, c.num_embeddings,
                                                        c.embedding_dim, c.feature_names.size(),
                                                        options, sequence_types));
  return EmbeddingShardingPlanner(topology).collective_plan(modules, group);
}

// Records `path` (InvalidArgument when a collection of either kind already has it) and checks
// the slot's install callback.
template <class Slot>
void check_slot(const Slot& slot, std::set<std::string>& paths, const Group& group,
                const char* kind) {
  FERRY_CHECK(paths.insert(slot.module_path).second, InvalidArgument, where(kWhere, group),
              ": two embedding collections have the module path \"",
              slot.module_path, "\" (the second one is an ", kind, ")");
  FERRY_CHECK(slot.install != nullptr, InvalidArgument, where(kWhere, group), ": the slot \"", slot.module_path, "\" has no install callback");
}

}  // namespace

ShardedCollections shard_collections(ShardableModel& model, const Group& group,
                                     const ModelShardingOptions& options) {
  detail::check_group(group, kWhere);
  std::vector<EmbeddingBagCollectionSlot> bags = model.embedding_bag_collections();
  std::vector<EmbeddingCollectionSlot> sequences = model.embedding_collections();
  std::set<std::string> paths;
  for (const EmbeddingBagCollectionSlot& slot : bags)
    check_slot(slot, paths, group, "embedding bag collection");
  for (const EmbeddingCollectionSlot& slot : sequences)
    check_slot(slot, paths, group, "embedding collection");
  ShardedCollections out;
  out.plan = plan_of(bags, sequences, group, options);
  std::set<std::string> planned;
  for (const auto& [path, module_plan] : out.plan.plan()) planned.insert(path);
  FERRY_CHECK(planned == paths, InvalidArgument, where(kWhere, group), ": the plan holds the modules ", module_list(planned), ", the model has ",
              module_list(paths), "; a plan must hold exactly the model's collections");
  for (const EmbeddingBagCollectionSlot& slot : bags) {
    auto sharded = std::make_shared<ShardedEmbeddingBagCollection>(
        slot.tables, slot.is_weighted, *out.plan.get_plan_for_module(slot.module_path), group,
        options.sharded, options.fused, slot.seed);
    slot.install(sharded);
    out.modules.push_back(std::make_shared<ShardedEbcModule>(sharded, slot.module_path));
  }
  for (const EmbeddingCollectionSlot& slot : sequences) {
    auto sharded = std::make_shared<ShardedEmbeddingCollection>(
        slot.tables, *out.plan.get_plan_for_module(slot.module_path), group, options.sharded,
        options.fused, slot.seed);
    slot.install(sharded);
    out.modules.push_back(std::make_shared<ShardedEcModule>(sharded, slot.module_path));
  }
  return out;
}

}  // namespace ferry::torchrec::detail
