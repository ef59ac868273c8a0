// Helpers shared by the embedding collections (internal, not installed).
#pragma once

#include <ferry/collectives/torchrec/modules/embedding_table.h>
#include <ferry/collectives/torchrec/sparse/keyed_jagged_tensor.h>
#include <ferry/collectives/torchrec/utils/format.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ferry::torchrec::detail {

// Throws InvalidArgument "<where>: feature \"f\" is configured but missing from the KJT's keys
// [...]" for the first feature that is not a key of the KJT.
void check_features_present(const char* where, const std::vector<std::string>& features,
                            const KeyedJaggedTensor& kjt);
// Copies state["<prefix>.<table>.weight"] into each table (present, same shape).
void load_table_weights(const char* where, const char* prefix,
                        const std::vector<std::shared_ptr<EmbeddingTable>>& tables,
                        const std::map<std::string, Tensor>& state);

}  // namespace ferry::torchrec::detail
