#include <ferry/collectives/torchrec/modules/embedding_collection.h>

#include <ferry/collectives/torchrec/modules/embedding_lookup.h>
#include <ferry/collectives/torchrec/modules/module_helpers.h>
#include <ferry/runtime/error.h>

namespace ferry::torchrec {

namespace {

size_t key_position(const SequenceEmbeddings& s, const std::string& key) {
  for (size_t i = 0; i < s.keys.size(); ++i)
    if (s.keys[i] == key) return i;
  FERRY_THROW(InvalidArgument, "SequenceEmbeddings: no key \"", key, "\" in ",
              detail::embedding_keys_str(s.keys));
}

}  // namespace

const Variable& SequenceEmbeddings::values(const std::string& key) const {
  return values_per_key[key_position(*this, key)];
}

JaggedTensor SequenceEmbeddings::operator[](const std::string& key) const {
  const size_t i = key_position(*this, key);
  return JaggedTensor::from_lengths(values_per_key[i].value(), lengths_per_key[i]);
}

std::map<std::string, JaggedTensor> SequenceEmbeddings::to_dict() const {
  std::map<std::string, JaggedTensor> out;
  for (const auto& k : keys) out.emplace(k, (*this)[k]);
  return out;
}

EmbeddingCollection::EmbeddingCollection(std::vector<EmbeddingConfig> tables, uint64_t seed,
                                         std::optional<FusedOptimizerConfig> fused)
    : configs_(std::move(tables)) {
  FERRY_CHECK(!configs_.empty(), InvalidArgument, "EmbeddingCollection: no tables");
  validate_tables(configs_, "EmbeddingCollection");
  for (const auto& c : configs_) {
    auto t = std::make_shared<EmbeddingTable>(c.name, init_table_weight(c, seed));
    if (fused) t->set_fused_optimizer(*fused);
    tables_.push_back(t);
    for (const auto& f : c.feature_names) features_.push_back(f);
  }
}

SequenceEmbeddings EmbeddingCollection::forward(const KeyedJaggedTensor& features) const {
  detail::check_features_present("EmbeddingCollection::forward", features_, features);
  std::vector<FeatureLookup> lookups;
  for (size_t t = 0; t < configs_.size(); ++t) {
    for (const auto& f : configs_[t].feature_names) {
      lookups.push_back({.table = tables_[t], .feature = f});
    }
  }
  SequenceEmbeddings out;
  out.keys = features_;
  out.values_per_key = sequence_embedding_lookup(lookups, features);
  for (const auto& f : features_) out.lengths_per_key.push_back(features[f].lengths());
  return out;
}

const std::shared_ptr<EmbeddingTable>& EmbeddingCollection::table(const std::string& name) const {
  for (const auto& t : tables_)
    if (t->name() == name) return t;
  std::vector<std::string> names;
  for (const auto& t : tables_) names.push_back(t->name());
  FERRY_THROW(InvalidArgument, "EmbeddingCollection: no table \"", name, "\" in ",
              detail::embedding_keys_str(names));
}

std::vector<Variable> EmbeddingCollection::parameters() const {
  std::vector<Variable> out;
  for (const auto& t : tables_) out.push_back(t->weight());
  return out;
}

void EmbeddingCollection::set_fused_optimizer(const FusedOptimizerConfig& config) {
  for (auto& t : tables_) t->set_fused_optimizer(config);
}

void EmbeddingCollection::set_bounds_check_mode(BoundsCheckMode mode) {
  for (auto& t : tables_) t->set_bounds_check_mode(mode);
}

std::map<std::string, Tensor> EmbeddingCollection::state_dict() const {
  std::map<std::string, Tensor> out;
  for (const auto& t : tables_) out["embeddings." + t->name() + ".weight"] = t->weight().value();
  return out;
}

void EmbeddingCollection::load_state_dict(const std::map<std::string, Tensor>& state) {
  detail::load_table_weights("EmbeddingCollection::load_state_dict", "embeddings", tables_,
                             state);
}

}  // namespace ferry::torchrec
