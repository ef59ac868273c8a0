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
    : configs_(tables),
      is_weighted_(is_weighted),
      plan_(plan),
      tables_(std::move(tables), plan, std::move(world), options, fused, seed,
              "ShardedEmbeddingBagCollection", "embedding_bags") {
  const auto groups = detail::tables_by_group(tables_);
  if (!groups[0].empty())
    shardings_.push_back(std::make_shared<DpPooledEmbeddingSharding>(tables_, groups[0], is_weighted_));
  if (!groups[1].empty())
    shardings_.push_back(std::make_shared<TwCwPooledEmbeddingSharding>(tables_, groups[1], is_weighted_));
  if (!groups[2].empty())
    shardings_.push_back(std::make_shared<RwPooledEmbeddingSharding>(tables_, groups[2], is_weighted_));
  if (!groups[3].empty()) {
    auto [intra, cross] = intra_and_cross_node_pg(tables_.world(), tables_.local_size());
    shardings_.push_back(std::make_shared<TwRwPooledEmbeddingSharding>(
        tables_, groups[3], is_weighted_, intra, cross));
  }
  output_parts_ = std::make_shared<const OutputParts>(
      OutputParts{tables_.features(), tables_.feature_dims(), shardings_});
}

namespace {
constexpr const char* kInputDist = "ShardedEmbeddingBagCollection::input_dist";
}  // namespace

ShardedInputDistAwaitable ShardedEmbeddingBagCollection::input_dist(
    ShardedEmbeddingContext& ctx, const KeyedJaggedTensor& features,
    const Variable& per_sample_weights) const {
  tables_.check_input(features, is_weighted_, kInputDist, per_sample_weights,
                      /*allow_vbe=*/true);
  return start_input_dist(ctx, features, per_sample_weights);
}

detail::InputCheckStatus ShardedEmbeddingBagCollection::input_check_status(
    const KeyedJaggedTensor& features) const {
  if (!tables_.options().check_inputs)
    return {std::vector<int64_t>(detail::InputCheckStatus::kWords, 0), ""};
  return tables_.input_status(features, is_weighted_, Variable(), /*allow_vbe=*/true,
                              kInputDist);
}

void ShardedEmbeddingBagCollection::raise_input_check(
    const std::vector<int64_t>& all_words, const detail::InputCheckStatus& mine) const {
  tables_.raise_input_status(all_words, mine, kInputDist);
}

ShardedInputDistAwaitable ShardedEmbeddingBagCollection::input_dist_checked(
    ShardedEmbeddingContext& ctx, const KeyedJaggedTensor& features) const {
  return start_input_dist(ctx, features, Variable());
}

ShardedInputDistAwaitable ShardedEmbeddingBagCollection::start_input_dist(
    ShardedEmbeddingContext& ctx, const KeyedJaggedTensor& features,
    const Variable& per_sample_weights) const {
  const char* where = kInputDist;
  ctx.batch_size = features.stride();
  ctx.shardings.clear();
  const bool vbe = features.variable_stride_per_key();
  ctx.inverse_rows.clear();
  if (vbe) ctx.inverse_rows = detail::inverse_rows(features, tables_.features(), where,
                                                   tables_.world().rank());
  // Only weights that require grad need a route back; constant ones are the KJT's weights.
  const Variable trained = per_sample_weights.defined() && per_sample_weights.requires_grad()
                               ? per_sample_weights
                               : Variable();
  std::vector<DistFeaturesAwaitable> phase1;
  for (const auto& s : shardings_) {
    ctx.shardings.push_back(std::make_shared<ShardingBatchContext>());
    ctx.shardings.back()->weights = trained;
    if (vbe) ctx.shardings.back()->vbe_input = features;
    phase1.push_back(s->input_dist(features, ctx.shardings.back()));
  }
  return detail::join_input_dists(std::move(phase1));
}

LazyAwaitable<PooledEmbeddings> ShardedEmbeddingBagCollection::compute_and_output_dist(
    ShardedEmbeddingContext& ctx, const std::vector<KeyedJaggedTensor>& dist_input) const {
  FERRY_CHECK(dist_input.size() == shardings_.size() && ctx.shardings.size() == shardings_.size(),
              InvalidArgument,
              "ShardedEmbeddingBagCollection::compute_and_output_dist: expected the input dist's "
              "result (",
              shardings_.size(), " KJTs) and its context, got ", dist_input.size());
  std::vector<Awaitable<Variable>> outs;
  outs.reserve(shardings_.size());
  for (size_t i = 0; i < shardings_.size(); ++i)
    outs.push_back(shardings_[i]->compute_and_output_dist(dist_input[i], ctx.shardings[i]));
  if (!ctx.inverse_rows.empty() || (!ctx.shardings.empty() && ctx.shardings[0]->vbe_input)) {
    // VBE: the groups' flat outputs joined, then one gather through their blocks and the
    // inverse indices.
    std::vector<std::vector<detail::VbeBlock>> blocks;
    for (const auto& c : ctx.shardings) blocks.push_back(c->vbe_blocks);
    const auto inverse = ctx.inverse_rows;
    return LazyAwaitable<PooledEmbeddings>(
        [outs = std::move(outs), blocks, inverse, parts = output_parts_]() mutable {
          const std::vector<int64_t>& dims = parts->dims;
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
          PooledEmbeddings out;
          out.keys = parts->keys;
          out.length_per_key = dims;
          out.values = detail::gather_vbe_output(flats.size() == 1 ? flats.front() : cat(flats, 0),
                                                 all, dims, inverse);
          return out;
        });
  }
  return LazyAwaitable<PooledEmbeddings>(
      [outs = std::move(outs), parts = output_parts_]() mutable {
        const auto& shardings = parts->shardings;
        std::vector<std::pair<OutputBlock, Variable>> pieces;
        if (outs.size() == 1) {
          // One sharding group whose blocks already come in (feature, column) order (table-wise
          // after its permute, for one): its output is the result, no split and cat to copy.
          const auto& blocks = shardings[0]->output_blocks();
          const bool in_order = std::is_sorted(
              blocks.begin(), blocks.end(), [](const OutputBlock& a, const OutputBlock& b) {
                return a.feature != b.feature ? a.feature < b.feature
                                              : a.col_offset < b.col_offset;
              });
          if (in_order) {
            PooledEmbeddings out;
            out.keys = parts->keys;
            out.length_per_key = parts->dims;
            out.values = outs[0].wait();
            return out;
          }
        }
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
        PooledEmbeddings out;
        out.keys = parts->keys;
        out.length_per_key = parts->dims;
        out.values = cols.size() == 1 ? cols.front() : cat(cols, 1);
        return out;
      });
}

PooledEmbeddings ShardedEmbeddingBagCollection::forward(const KeyedJaggedTensor& features,
                                                        const Variable& per_sample_weights) const {
  ShardedEmbeddingContext ctx;
  std::vector<KeyedJaggedTensor> d = input_dist(ctx, features, per_sample_weights).wait().wait();
  return compute_and_output_dist(ctx, d).value();
}

std::map<std::string, std::vector<std::shared_ptr<EmbeddingTable>>>
ShardedEmbeddingBagCollection::local_tables() const {
  std::map<std::string, std::vector<std::shared_ptr<EmbeddingTable>>> out;
  for (const auto& t : tables_.tables()) out[t.config.name] = t.tables;
  return out;
}

std::vector<std::shared_ptr<EmbeddingTable>> ShardedEmbeddingBagCollection::data_parallel_tables()
    const {
  return tables_.data_parallel_tables();
}

std::vector<Variable> ShardedEmbeddingBagCollection::data_parallel_parameters() const {
  std::vector<Variable> out;
  for (const auto& t : tables_.data_parallel_tables()) out.push_back(t->weight());
  return out;
}

void ShardedEmbeddingBagCollection::reduce_data_parallel_gradients() const {
  tables_.reduce_data_parallel_gradients();
}

void ShardedEmbeddingBagCollection::step_data_parallel() { tables_.step_data_parallel(); }

std::map<std::string, Tensor> ShardedEmbeddingBagCollection::state_dict() const {
  return tables_.state_dict();
}

std::map<std::string, std::vector<LocalShard>> ShardedEmbeddingBagCollection::local_state_dict()
    const {
  return tables_.local_state_dict();
}

void ShardedEmbeddingBagCollection::load_state_dict(const std::map<std::string, Tensor>& state) {
  tables_.load_state_dict(state);
}

std::map<std::string, Tensor> ShardedEmbeddingBagCollection::optimizer_state_dict() const {
  return tables_.optimizer_state_dict();
}

void ShardedEmbeddingBagCollection::load_optimizer_state_dict(const std::map<std::string, Tensor>& state) {
  tables_.load_optimizer_state_dict(state);
}

}  // namespace ferry::torchrec
