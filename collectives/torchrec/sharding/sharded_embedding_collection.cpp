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
    : configs_(tables),
      plan_(plan),
      tables_((validate_tables(tables, "ShardedEmbeddingCollection"), bag_configs(tables)), plan,
              std::move(world), options, fused, seed, "ShardedEmbeddingCollection",
              "embeddings") {
  const auto groups = detail::tables_by_group(tables_);
  FERRY_CHECK(groups[3].empty(), InvalidArgument,
              "ShardedEmbeddingCollection: table_row_wise sharding is not supported for "
              "sequence embeddings (table \"",
              groups[3].empty() ? std::string() : configs_[static_cast<size_t>(groups[3][0])].name,
              "\"); use row_wise");
  if (!groups[0].empty())
    shardings_.push_back(std::make_shared<DpSequenceEmbeddingSharding>(tables_, groups[0]));
  if (!groups[1].empty()) {
    std::set<int64_t> widths;
    for (int t : groups[1])
      for (const auto& m : tables_.tables()[static_cast<size_t>(t)].sharding.sharding_spec)
        widths.insert(m.cols());
    for (int64_t w : widths)
      shardings_.push_back(std::make_shared<TwCwSequenceEmbeddingSharding>(tables_, groups[1], w));
  }
  if (!groups[2].empty())
    shardings_.push_back(std::make_shared<RwSequenceEmbeddingSharding>(tables_, groups[2]));
}

namespace {
constexpr const char* kInputDist = "ShardedEmbeddingCollection::input_dist";
}  // namespace

ShardedInputDistAwaitable ShardedEmbeddingCollection::input_dist(
    ShardedEmbeddingContext& ctx, const KeyedJaggedTensor& features) const {
  tables_.check_input(features, false, kInputDist);
  return input_dist_checked(ctx, features);
}

detail::InputCheckStatus ShardedEmbeddingCollection::input_check_status(
    const KeyedJaggedTensor& features) const {
  if (!tables_.options().check_inputs)
    return {std::vector<int64_t>(detail::InputCheckStatus::kWords, 0), ""};
  return tables_.input_status(features, false, Variable(), /*allow_vbe=*/false, kInputDist);
}

void ShardedEmbeddingCollection::raise_input_check(const std::vector<int64_t>& all_words,
                                                   const detail::InputCheckStatus& mine) const {
  tables_.raise_input_status(all_words, mine, kInputDist);
}

ShardedInputDistAwaitable ShardedEmbeddingCollection::input_dist_checked(
    ShardedEmbeddingContext& ctx, const KeyedJaggedTensor& features) const {
  ctx.batch_size = features.stride();
  ctx.shardings.clear();
  ctx.lengths_per_feature.clear();
  for (const auto& f : tables_.features()) ctx.lengths_per_feature.push_back(features[f].lengths());
  std::vector<DistFeaturesAwaitable> phase1;
  for (const auto& s : shardings_) {
    ctx.shardings.push_back(std::make_shared<ShardingBatchContext>());
    phase1.push_back(s->input_dist(features, ctx.shardings.back()));
  }
  return detail::join_input_dists(std::move(phase1));
}

LazyAwaitable<SequenceEmbeddings> ShardedEmbeddingCollection::compute_and_output_dist(
    ShardedEmbeddingContext& ctx, const std::vector<KeyedJaggedTensor>& dist_input) const {
  FERRY_CHECK(dist_input.size() == shardings_.size() && ctx.shardings.size() == shardings_.size(),
              InvalidArgument,
              "ShardedEmbeddingCollection::compute_and_output_dist: expected the input dist's "
              "result (",
              shardings_.size(), " KJTs) and its context, got ", dist_input.size());
  std::vector<Awaitable<std::vector<Variable>>> outs;
  for (size_t i = 0; i < shardings_.size(); ++i)
    outs.push_back(shardings_[i]->compute_and_output_dist(dist_input[i], ctx.shardings[i]));
  const auto shardings = shardings_;
  const std::vector<std::string> keys = tables_.features();
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
  ShardedEmbeddingContext ctx;
  std::vector<KeyedJaggedTensor> d = input_dist(ctx, features).wait().wait();
  return compute_and_output_dist(ctx, d).value();
}

std::map<std::string, std::vector<std::shared_ptr<EmbeddingTable>>>
ShardedEmbeddingCollection::local_tables() const {
  std::map<std::string, std::vector<std::shared_ptr<EmbeddingTable>>> out;
  for (const auto& t : tables_.tables()) out[t.config.name] = t.tables;
  return out;
}

std::vector<std::shared_ptr<EmbeddingTable>> ShardedEmbeddingCollection::data_parallel_tables()
    const {
  return tables_.data_parallel_tables();
}
void ShardedEmbeddingCollection::reduce_data_parallel_gradients() const {
  tables_.reduce_data_parallel_gradients();
}
void ShardedEmbeddingCollection::step_data_parallel() { tables_.step_data_parallel(); }
std::map<std::string, Tensor> ShardedEmbeddingCollection::state_dict() const {
  return tables_.state_dict();
}
std::map<std::string, std::vector<LocalShard>> ShardedEmbeddingCollection::local_state_dict()
    const {
  return tables_.local_state_dict();
}
void ShardedEmbeddingCollection::load_state_dict(const std::map<std::string, Tensor>& state) {
  tables_.load_state_dict(state);
}

std::map<std::string, Tensor> ShardedEmbeddingCollection::optimizer_state_dict() const {
  return tables_.optimizer_state_dict();
}

void ShardedEmbeddingCollection::load_optimizer_state_dict(const std::map<std::string, Tensor>& state) {
  tables_.load_optimizer_state_dict(state);
}

}  // namespace ferry::torchrec
