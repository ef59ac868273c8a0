#include <ferry/collectives/torchrec/sharding/sharded_embedding_collection.h>

#include <ferry/autograd/ops.h>
#include <ferry/collectives/torchrec/sharding/dp_sharding.h>
#include <ferry/collectives/torchrec/sharding/rw_sharding.h>
#include <ferry/collectives/torchrec/sharding/twcw_sharding.h>
#include <ferry/runtime/error.h>

#include <set>

namespace ferry::torchrec {

namespace {
std::vector<EmbeddingBagConfig> bag_configs(const std::vector<EmbeddingConfig>& c) {
  std::vector<EmbeddingBagConfig> out;
  for (const auto& x : c) out.push_back(as_bag_config(x));
  return out;
}
}  // namespace

ShardedEmbeddingCollection::ShardedEmbeddingCollection(std::vector<EmbeddingConfig> tables,
                                                       const ModuleShardingPlan& plan, Group world,
                                                       ShardedEmbeddingOptions options,
                                                       std::optional<FusedOptimizerConfig> fused,
                                                       uint64_t seed)
    : ShardedCollectionBase(
          (validate_tables(tables, "ShardedEmbeddingCollection"), bag_configs(tables)), plan,
          std::move(world), options, fused, seed, /*weighted=*/false, /*allow_vbe=*/false,
          "ShardedEmbeddingCollection", "embeddings"),
      configs_(std::move(tables)) {
  const detail::ShardedTables& sharded = sharded_tables();
  const auto groups = detail::tables_by_group(sharded);
  FERRY_CHECK(groups[3].empty(), InvalidArgument,
              "ShardedEmbeddingCollection: table_row_wise sharding is not supported for "
              "sequence embeddings (table \"",
              groups[3].empty() ? std::string() : configs_[static_cast<size_t>(groups[3][0])].name,
              "\"); use row_wise");
  if (!groups[0].empty())
    shardings_.push_back(std::make_shared<DpSequenceEmbeddingSharding>(sharded, groups[0]));
  if (!groups[1].empty()) {
    std::set<int64_t> widths;
    for (int t : groups[1])
      for (const auto& m : sharded.tables()[static_cast<size_t>(t)].sharding.sharding_spec)
        widths.insert(m.cols());
    for (int64_t w : widths)
      shardings_.push_back(std::make_shared<TwCwSequenceEmbeddingSharding>(sharded, groups[1], w));
  }
  if (!groups[2].empty())
    shardings_.push_back(std::make_shared<RwSequenceEmbeddingSharding>(sharded, groups[2]));
}

ShardedInputDistAwaitable ShardedEmbeddingCollection::input_dist(
    Context& ctx, const KeyedJaggedTensor& features) const {
  check_input(features);
  return input_dist_checked(ctx, features);
}

ShardedInputDistAwaitable ShardedEmbeddingCollection::input_dist_checked(
    Context& ctx, const KeyedJaggedTensor& features) const {
  ctx.batch_size = features.stride();
  ctx.sharding_contexts.clear();
  ctx.lengths_per_feature.clear();
  for (const auto& f : feature_names()) ctx.lengths_per_feature.push_back(features[f].lengths());
  std::vector<DistFeaturesAwaitable> phase1;
  for (const auto& s : shardings_) {
    std::shared_ptr<SequenceShardingContext> c = s->create_context();
    ctx.sharding_contexts.push_back(c);
    phase1.push_back(s->input_dist(features, c));
  }
  return detail::join_input_dists(std::move(phase1));
}

LazyAwaitable<SequenceEmbeddings> ShardedEmbeddingCollection::compute_and_output_dist(
    Context& ctx, const std::vector<KeyedJaggedTensor>& dist_input) const {
  check_dist_input(ctx, dist_input, shardings_.size(),
                   "ShardedEmbeddingCollection::compute_and_output_dist");
  std::vector<Awaitable<std::vector<Variable>>> outs;
  for (size_t i = 0; i < shardings_.size(); ++i) {
    const std::shared_ptr<EmbeddingShardingContext>& c = ctx.sharding_contexts[i];
    outs.push_back(shardings_[i]->compute_and_output_dist(
        dist_input[i],
        std::shared_ptr<SequenceShardingContext>(
            c, &context_as<SequenceShardingContext>(
                   *c, "ShardedEmbeddingCollection::compute_and_output_dist"))));
  }
  const auto shardings = shardings_;
  const std::vector<std::string> keys = feature_names();
  const std::vector<Tensor> lengths = ctx.lengths_per_feature;
  return LazyAwaitable<SequenceEmbeddings>(
      [outs, shardings, keys, lengths]() mutable {
        std::vector<std::pair<OutputBlock, Variable>> pieces;
        for (size_t i = 0; i < outs.size(); ++i) {
          const std::vector<Variable> ys = outs[i].wait();
          const auto& blocks = shardings[i]->output_blocks();
          for (size_t j = 0; j < blocks.size(); ++j) pieces.emplace_back(blocks[j], ys[j]);
        }
        pieces = detail::sorted_pieces(std::move(pieces));
        SequenceEmbeddings out;
        out.keys = keys;
        out.lengths_per_key = lengths;
        for (size_t f = 0; f < keys.size(); ++f) {
          std::vector<Variable> cols;
          for (const auto& p : pieces)
            if (p.first.feature == static_cast<int>(f)) cols.push_back(p.second);
          out.values_per_key.push_back(cols.size() == 1 ? cols.front() : cat(cols, 1));
        }
        return out;
      });
}

SequenceEmbeddings ShardedEmbeddingCollection::forward(const KeyedJaggedTensor& features) const {
  Context ctx;
  std::vector<KeyedJaggedTensor> d = input_dist(ctx, features).wait().wait();
  return compute_and_output_dist(ctx, d).value();
}

}  // namespace ferry::torchrec
