#include <ferry/collectives/torchrec/sharding/sharded_tables.h>

#include <ferry/collectives/torchrec/planner/plan_agreement.h>
#include <ferry/collectives/torchrec/utils/topology.h>
#include <ferry/runtime/error.h>

namespace ferry::torchrec::detail {

Tensor cut_shard(const Tensor& full, const ShardMetadata& m) {
  return full.narrow_copy(0, m.row_offset(), m.rows()).narrow_copy(1, m.col_offset(), m.cols());
}

ShardedTables::ShardedTables(std::vector<EmbeddingBagConfig> configs,
                             const ModuleShardingPlan& plan, Group world,
                             ShardedEmbeddingOptions options,
                             std::optional<FusedOptimizerConfig> fused, uint64_t seed,
                             const char* where, const char* state_prefix)
    : world_(std::move(world)), options_(options), fused_(fused), where_(where),
      prefix_(state_prefix) {
  FERRY_CHECK(world_.valid(), InvalidArgument, where, ": the world group is null");
  const int W = world_.size();
  local_size_ = options_.local_size > 0 ? options_.local_size : get_local_size(world_);
  FERRY_CHECK(W % local_size_ == 0, InvalidArgument, where, ": local_size ", local_size_,
              " does not divide the world size ", W);
  validate_tables(configs, where);
  if (fused_) validate(*fused_);
  std::vector<TableShape> shapes;
  for (const auto& c : configs) shapes.push_back({c.name, c.num_embeddings, c.embedding_dim});
  validate_module_plan(plan, shapes, W, local_size_);
  // Once, collectively: the same plan on every rank.
  check_plan_agreement(ShardingPlan({{"", plan}}), world_);
  if (options_.qcomms_config) codecs_ = get_qcomm_codecs(options_.qcomms_config);

  const int me = world_.rank();
  for (size_t i = 0; i < configs.size(); ++i) {
    ShardedTable t;
    t.config = configs[i];
    t.index = static_cast<int>(i);
    t.sharding = plan.at(configs[i].name);
    const TableShape shape = shapes[i];
    t.shards = t.sharding.shards_on_rank(me, shape);
    if (!t.shards.empty()) {
      const Tensor full = init_table_weight(t.config, seed);
      for (const auto& m : t.shards) {
        std::shared_ptr<EmbeddingTable> table;
        if (t.sharding.sharding_type == ShardingType::DATA_PARALLEL) {
          table = std::make_shared<EmbeddingTable>(t.config.name, full);
        } else {
          table = std::make_shared<EmbeddingTable>(
              t.config.name, cut_shard(full, m), shape.rows, shape.dim,
              TableShard{m.row_offset(), m.rows(), m.col_offset(), m.cols()});
          if (fused_ && t.sharding.compute_kernel != EmbeddingComputeKernel::DENSE)
            table->set_fused_optimizer(*fused_);
        }
        table->set_bounds_check_mode(options_.bounds_check_mode);
        t.tables.push_back(table);
      }
    }
    for (const auto& f : t.config.feature_names) {
      features_.push_back(f);
      feature_table_.push_back(static_cast<int>(i));
      feature_dims_.push_back(t.config.embedding_dim);
    }
    tables_.push_back(std::move(t));
  }
}

}  // namespace ferry::torchrec::detail
