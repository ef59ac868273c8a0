#include <ferry/collectives/torchrec/modules/module_helpers.h>

#include <ferry/runtime/error.h>


namespace ferry::torchrec {

namespace detail {

// Every feature must be a key of the KJT.
void check_features_present(const char* where, const std::vector<std::string>& features,
                            const KeyedJaggedTensor& kjt) {
  const auto& keys = kjt.keys();
  for (const auto& f : features) {
    bool found = false;
    for (const auto& k : keys) found = found || k == f;
    FERRY_CHECK(found, InvalidArgument, where, ": feature \"", f,
                "\" is configured but missing from the KJT's keys ", keys_str(keys, kEveryEntry));
  }
}

void load_table_weights(const char* where, const char* prefix,
                 const std::vector<std::shared_ptr<EmbeddingTable>>& tables,
                 const std::map<std::string, Tensor>& state) {
  for (const auto& t : tables) {
    const std::string key = ferry::detail::str(prefix, ".", t->name(), ".weight");
    auto it = state.find(key);
    FERRY_CHECK(it != state.end(), InvalidArgument, where, ": the state has no \"", key, "\"");
    Tensor w = t->weight().value();
    FERRY_CHECK(it->second.shape() == w.shape(), InvalidArgument, where, ": \"", key, "\" is ",
                shape_str(it->second.shape()), ", the table is ", shape_str(w.shape()));
    w.copy_(it->second);
  }
}

}  // namespace detail

}  // namespace ferry::torchrec
