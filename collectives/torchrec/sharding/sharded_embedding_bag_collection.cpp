#include <ferry/collectives/torchrec/sharding/sharded_embedding_bag_collection.h>

#include <ferry/autograd/ops.h>
#include <ferry/collectives/torchrec/sharding/dp_sharding.h>
#include <ferry/collectives/torchrec/sharding/rw_sharding.h>
#include <ferry/collectives/torchrec/sharding/twcw_sharding.h>
#include <ferry/collectives/torchrec/sharding/twrw_sharding.h>
#include <ferry/collectives/torchrec/utils/topology.h>
#include <ferry/runtime/error.h>

#include <algorithm>

namespace ferry::torchrec {

struct ShardedEmbeddingBagCollection::OutputParts {
  std::vector<std::string> keys;
  std::vector<int64_t> dims;
  std::vector<std::shared_ptr<PooledEmbeddingSharding>> shardings;
};

ShardedEmbeddingBagCollection::ShardedEmbeddingBagCollection(
    std::vector<EmbeddingBagConfig> tables, bool is_weighted, const ModuleShardingPlan& plan,
    Group world, ShardedEmbeddingOptions options, std::optional<FusedOptimizerConfig> fused,
    uint64_t seed)
    : ShardedCollectionBase(tables, plan, std::move(world), options, fused, seed, is_weighted,
                            /*allow_vbe=*/true, "ShardedEmbeddingBagCollection",
                            "embedding_bags"),
      configs_(std::move(tables)),
      is_weighted_(is_weighted) {
  const detail::ShardedTables& sharded = sharded_tables();
  const auto groups = detail::tables_by_group(sharded);
  if (!groups[0].empty())
    shardings_.push_back(
        std::make_shared<DpPooledEmbeddingSharding>(sharded, groups[0], is_weighted_));
  if (!groups[1].empty())
    shardings_.push_back(
        std::make_shared<TwCwPooledEmbeddingSharding>(sharded, groups[1], is_weighted_));
  if (!groups[2].empty())
    shardings_.push_back(
        std::make_shared<RwPooledEmbeddingSharding>(sharded, groups[2], is_weighted_));
  if (!groups[3].empty()) {
    auto [intra, cross] = intra_and_cross_node_pg(sharded.world(), sharded.local_size());
    shardings_.push_back(std::make_shared<TwRwPooledEmbeddingSharding>(
        sharded, groups[3], is_weighted_, intra, cross));
  }
  output_parts_ = std::make_shared<const OutputParts>(
      OutputParts{sharded.features(), sharded.feature_dims(), shardings_});
}

namespace {

// A pooled sharding's context as its own type (it made it in input_dist), sharing ownership.
std::shared_ptr<PooledShardingContext> pooled_context(
    const std::shared_ptr<EmbeddingShardingContext>& c) {
  return {c, &context_as<PooledShardingContext>(
                 *c, "ShardedEmbeddingBagCollection::compute_and_output_dist")};
}

PooledEmbeddings keyed(const std::vector<std::string>& keys, const std::vector<int64_t>& dims,
                       Variable values) {
  PooledEmbeddings out;
  out.keys = keys;
  out.length_per_key = dims;
  out.values = std::move(values);
  return out;
}

// VBE: the groups' flat outputs joined, then one gather through their blocks and the inverse
// indices.
PooledEmbeddings vbe_output(std::vector<Awaitable<Variable>>& outs,
                            const std::vector<std::vector<detail::VbeBlock>>& blocks,
                            const std::vector<std::vector<int64_t>>& inverse,
                            const std::vector<std::string>& keys,
                            const std::vector<int64_t>& dims) {
  std::vector<Variable> flats;
  std::vector<detail::VbeBlock> all;
  int64_t base = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    const Variable y = outs[i].wait();
    for (detail::VbeBlock b : blocks[i]) {
      b.start += base;
      all.push_back(b);
    }
    base += y.value().numel();
    flats.push_back(reshape(y, {y.value().numel()}));
  }
  return keyed(keys, dims,
               detail::gather_vbe_output(flats.size() == 1 ? flats.front() : cat(flats, 0), all,
                                         dims, inverse));
}

// The groups' outputs split into their blocks, put in (feature, column) order.
PooledEmbeddings pooled_output(
    std::vector<Awaitable<Variable>>& outs,
    const std::vector<std::shared_ptr<PooledEmbeddingSharding>>& shardings,
    const std::vector<std::string>& keys, const std::vector<int64_t>& dims) {
  if (outs.size() == 1) {
    // One sharding group whose blocks already come in (feature, column) order (table-wise
    // after its permute, for one): its output is the result, no split and cat to copy.
    const auto& blocks = shardings[0]->output_blocks();
    const bool in_order = std::is_sorted(
        blocks.begin(), blocks.end(), [](const OutputBlock& a, const OutputBlock& b) {
          return a.feature != b.feature ? a.feature < b.feature : a.col_offset < b.col_offset;
        });
    if (in_order) return keyed(keys, dims, outs[0].wait());
  }
  std::vector<std::pair<OutputBlock, Variable>> pieces;
  for (size_t i = 0; i < outs.size(); ++i) {
    const Variable y = outs[i].wait();
    const auto& blocks = shardings[i]->output_blocks();
    std::vector<int64_t> widths;
    for (const auto& b : blocks) widths.push_back(b.width);
    const std::vector<Variable> parts =
        blocks.size() == 1 ? std::vector<Variable>{y} : split(y, widths, 1);
    for (size_t j = 0; j < blocks.size(); ++j) pieces.emplace_back(blocks[j], parts[j]);
  }
  pieces = detail::sorted_pieces(std::move(pieces));
  std::vector<Variable> cols;
  for (auto& p : pieces) cols.push_back(p.second);
  return keyed(keys, dims, cols.size() == 1 ? cols.front() : cat(cols, 1));
}
}  // namespace

ShardedInputDistAwaitable ShardedEmbeddingBagCollection::input_dist(
    ShardedEmbeddingContext& ctx, const KeyedJaggedTensor& features,
    const Variable& per_sample_weights) const {
  check_input(features, per_sample_weights);
  return start_input_dist(ctx, features, per_sample_weights);
}

ShardedInputDistAwaitable ShardedEmbeddingBagCollection::input_dist_checked(
    ShardedEmbeddingContext& ctx, const KeyedJaggedTensor& features) const {
  return start_input_dist(ctx, features, Variable());
}

ShardedInputDistAwaitable ShardedEmbeddingBagCollection::start_input_dist(
    ShardedEmbeddingContext& ctx, const KeyedJaggedTensor& features,
    const Variable& per_sample_weights) const {
  ctx.batch_size = features.stride();
  ctx.shardings.clear();
  const bool vbe = features.variable_stride_per_key();
  ctx.inverse_rows.clear();
  if (vbe) ctx.inverse_rows = detail::inverse_rows(features, feature_names(), input_dist_op(),
                                                   world());
  // Only weights that require grad need a route back; constant ones are the KJT's weights.
  const Variable trained = per_sample_weights.defined() && per_sample_weights.requires_grad()
                               ? per_sample_weights
                               : Variable();
  std::vector<DistFeaturesAwaitable> phase1;
  for (const auto& s : shardings_) {
    std::shared_ptr<PooledShardingContext> c = s->create_context();
    c->weights = trained;
    if (vbe) c->vbe_input = features;
    ctx.shardings.push_back(c);
    phase1.push_back(s->input_dist(features, c));
  }
  return detail::join_input_dists(std::move(phase1));
}

LazyAwaitable<PooledEmbeddings> ShardedEmbeddingBagCollection::compute_and_output_dist(
    ShardedEmbeddingContext& ctx, const std::vector<KeyedJaggedTensor>& dist_input) const {
  check_dist_input(ctx, dist_input, shardings_.size(),
                   "ShardedEmbeddingBagCollection::compute_and_output_dist");
  std::vector<Awaitable<Variable>> outs;
  outs.reserve(shardings_.size());
  bool vbe = !ctx.inverse_rows.empty();
  for (size_t i = 0; i < shardings_.size(); ++i) {
    const std::shared_ptr<PooledShardingContext> c = pooled_context(ctx.shardings[i]);
    outs.push_back(shardings_[i]->compute_and_output_dist(dist_input[i], c));
    vbe = vbe || c->vbe_input.has_value();
  }
  if (vbe) {
    std::vector<std::vector<detail::VbeBlock>> blocks;
    for (const auto& c : ctx.shardings) blocks.push_back(pooled_context(c)->vbe_blocks);
    return LazyAwaitable<PooledEmbeddings>(
        [outs = std::move(outs), blocks, inverse = ctx.inverse_rows,
         parts = output_parts_]() mutable {
          return vbe_output(outs, blocks, inverse, parts->keys, parts->dims);
        });
  }
  return LazyAwaitable<PooledEmbeddings>([outs = std::move(outs), parts = output_parts_]() mutable {
    return pooled_output(outs, parts->shardings, parts->keys, parts->dims);
  });
}

PooledEmbeddings ShardedEmbeddingBagCollection::forward(const KeyedJaggedTensor& features,
                                                        const Variable& per_sample_weights) const {
  ShardedEmbeddingContext ctx;
  std::vector<KeyedJaggedTensor> d = input_dist(ctx, features, per_sample_weights).wait().wait();
  return compute_and_output_dist(ctx, d).value();
}

}  // namespace ferry::torchrec
