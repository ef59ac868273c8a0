#include <ferry/collectives/torchrec/modules/embedding_bag_collection.h>

#include <ferry/collectives/torchrec/modules/vbe_pooling.h>

#include <ferry/collectives/torchrec/modules/embedding_lookup.h>
#include <ferry/collectives/torchrec/modules/module_helpers.h>
#include <ferry/runtime/error.h>


namespace ferry::torchrec {

KeyedTensor PooledEmbeddings::keyed_tensor() const {
  return KeyedTensor(keys, length_per_key, values.value(), 1);
}


EmbeddingBagCollection::EmbeddingBagCollection(std::vector<EmbeddingBagConfig> tables,
                                               bool is_weighted, uint64_t seed,
                                               std::optional<FusedOptimizerConfig> fused)
    : configs_(std::move(tables)), is_weighted_(is_weighted) {
  validate_tables(configs_, "EmbeddingBagCollection");
  for (const auto& c : configs_) {
    auto t = std::make_shared<EmbeddingTable>(c.name, init_table_weight(c, seed));
    if (fused) t->set_fused_optimizer(*fused);
    tables_.push_back(t);
    for (const auto& f : c.feature_names) {
      features_.push_back(f);
      dims_.push_back(c.embedding_dim);
    }
  }
}

PooledEmbeddings EmbeddingBagCollection::forward(const KeyedJaggedTensor& features,
                                                 const Variable& per_sample_weights) const {
  const char* where = "EmbeddingBagCollection::forward";
  detail::check_features_present(where, features_, features);
  std::vector<FeatureLookup> lookups;
  for (size_t t = 0; t < configs_.size(); ++t) {
    for (const auto& f : configs_[t].feature_names) {
      lookups.push_back({.table = tables_[t], .feature = f, .pooling = configs_[t].pooling});
    }
  }
  Variable weights;
  if (is_weighted_) {
    if (per_sample_weights.defined()) {
      weights = per_sample_weights;
    } else {
      FERRY_CHECK(features.has_weights(), InvalidArgument, where,
                  ": the collection is weighted but the KJT has no weights");
      weights = Variable(features.weights());
    }
  } else {
    FERRY_CHECK(!per_sample_weights.defined(), InvalidArgument, where,
                ": per_sample_weights given to an unweighted collection");
  }
  PooledEmbeddings out;
  out.keys = features_;
  out.length_per_key = dims_;
  if (!features.variable_stride_per_key()) {
    out.values = pooled_embedding_lookup(lookups, features, weights);
    return out;
  }
  // VBE (vbe_pooling.h): pool each feature over its own batch, expand by the inverse indices.
  const auto inverse = detail::inverse_rows(features, features_, where, 0);
  const Variable padded =
      pooled_embedding_lookup(lookups, detail::pad_variable_stride(features), weights);
  const int64_t C = padded.value().size(1);
  std::vector<detail::VbeBlock> blocks;
  int64_t col = 0;
  for (size_t f = 0; f < features_.size(); ++f) {
    blocks.push_back({static_cast<int>(f), 0, dims_[f], col, C});
    col += dims_[f];
  }
  out.values = detail::gather_vbe_output(padded, blocks, dims_, inverse);
  return out;
}

const std::shared_ptr<EmbeddingTable>& EmbeddingBagCollection::table(
    const std::string& name) const {
  for (const auto& t : tables_)
    if (t->name() == name) return t;
  std::vector<std::string> names;
  for (const auto& t : tables_) names.push_back(t->name());
  FERRY_THROW(InvalidArgument, "EmbeddingBagCollection: no table \"", name, "\" in ",
              detail::embedding_keys_str(names));
}

std::vector<Variable> EmbeddingBagCollection::parameters() const {
  std::vector<Variable> out;
  for (const auto& t : tables_) out.push_back(t->weight());
  return out;
}

void EmbeddingBagCollection::set_fused_optimizer(const FusedOptimizerConfig& config) {
  for (auto& t : tables_) t->set_fused_optimizer(config);
}

void EmbeddingBagCollection::set_bounds_check_mode(BoundsCheckMode mode) {
  for (auto& t : tables_) t->set_bounds_check_mode(mode);
}

std::map<std::string, Tensor> EmbeddingBagCollection::state_dict() const {
  std::map<std::string, Tensor> out;
  for (const auto& t : tables_) out["embedding_bags." + t->name() + ".weight"] = t->weight().value();
  return out;
}

void EmbeddingBagCollection::load_state_dict(const std::map<std::string, Tensor>& state) {
  detail::load_table_weights("EmbeddingBagCollection::load_state_dict", "embedding_bags", tables_,
                      state);
}

}  // namespace ferry::torchrec
