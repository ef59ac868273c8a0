#include <ferry/collectives/torchrec/modules/embedding_bag_collection.h>

#include <ferry/collectives/torchrec/modules/embedding_lookup.h>
#include <ferry/collectives/torchrec/modules/module_helpers.h>
#include <ferry/collectives/torchrec/modules/vbe_pooling.h>
#include <ferry/runtime/error.h>

namespace ferry::torchrec {

KeyedTensor PooledEmbeddings::keyed_tensor() const {
  return KeyedTensor(keys, length_per_key, values.value(), 1);
}

EmbeddingBagCollection::EmbeddingBagCollection(std::vector<EmbeddingBagConfig> tables,
                                               bool is_weighted, uint64_t seed,
                                               std::optional<FusedOptimizerConfig> fused)
    : EmbeddingModuleBase((validate_tables(tables, "EmbeddingBagCollection"), tables), seed,
                          fused, "EmbeddingBagCollection", "embedding_bags"),
      configs_(std::move(tables)),
      is_weighted_(is_weighted) {
  for (const auto& c : configs_)
    dims_.insert(dims_.end(), c.feature_names.size(), c.embedding_dim);
}

PooledEmbeddings EmbeddingBagCollection::forward(const KeyedJaggedTensor& features,
                                                 const Variable& per_sample_weights) const {
  const char* where = "EmbeddingBagCollection::forward";
  const std::vector<std::string>& names = feature_names();
  detail::check_features_present(where, names, features);
  std::vector<FeatureLookup> lookups;
  for (size_t t = 0; t < configs_.size(); ++t) {
    for (const auto& f : configs_[t].feature_names) {
      lookups.push_back({.table = tables()[t], .feature = f, .pooling = configs_[t].pooling});
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
  out.keys = names;
  out.length_per_key = dims_;
  if (!features.variable_stride_per_key()) {
    out.values = pooled_embedding_lookup(lookups, features, weights);
    return out;
  }
  // VBE (vbe_pooling.h): pool each feature over its own batch, expand by the inverse indices.
  const auto inverse = detail::inverse_rows(features, names, where);
  const Variable padded =
      pooled_embedding_lookup(lookups, detail::pad_variable_stride(features), weights);
  const int64_t C = padded.value().size(1);
  std::vector<detail::VbeBlock> blocks;
  int64_t col = 0;
  for (size_t f = 0; f < names.size(); ++f) {
    blocks.push_back({static_cast<int>(f), 0, dims_[f], col, C});
    col += dims_[f];
  }
  out.values = detail::gather_vbe_output(padded, blocks, dims_, inverse);
  return out;
}

}  // namespace ferry::torchrec
