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
              detail::keys_str(s.keys, detail::kEveryEntry));
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

namespace {

// The configs as the base class takes them, after the checks an EmbeddingCollection adds.
std::vector<EmbeddingBagConfig> validated_bag_configs(const std::vector<EmbeddingConfig>& tables) {
  FERRY_CHECK(!tables.empty(), InvalidArgument, "EmbeddingCollection: no tables");
  validate_tables(tables, "EmbeddingCollection");
  std::vector<EmbeddingBagConfig> out;
  for (const auto& c : tables) out.push_back(as_bag_config(c));
  return out;
}

}  // namespace

EmbeddingCollection::EmbeddingCollection(std::vector<EmbeddingConfig> tables, uint64_t seed,
                                         std::optional<FusedOptimizerConfig> fused)
    : EmbeddingModuleBase(validated_bag_configs(tables), seed, fused, "EmbeddingCollection",
                          "embeddings"),
      configs_(std::move(tables)) {}

SequenceEmbeddings EmbeddingCollection::forward(const KeyedJaggedTensor& features) const {
  const std::vector<std::string>& names = feature_names();
  detail::check_features_present("EmbeddingCollection::forward", names, features);
  std::vector<FeatureLookup> lookups;
  for (size_t t = 0; t < configs_.size(); ++t) {
    for (const auto& f : configs_[t].feature_names) {
      lookups.push_back({.table = tables()[t], .feature = f});
    }
  }
  SequenceEmbeddings out;
  out.keys = names;
  out.values_per_key = sequence_embedding_lookup(lookups, features);
  for (const auto& f : names) out.lengths_per_key.push_back(features[f].lengths());
  return out;
}

}  // namespace ferry::torchrec
