// column_wise sharding (torchrec's cw_sharding): a table's columns split into ranges, each range
// a table-wise unit (tw_sharding.h) on its rank. What column ranges add to table-wise: a feature
// repeats once per column shard, so the units need wire names that tell the copies apart, and
// the pooled output arrives in rank order and must be put back in (feature, column) order.
#pragma once

#include <ferry/collectives/torchrec/dist_data/pooled_embeddings_all_to_all.h>
#include <ferry/collectives/torchrec/sharding/tw_sharding.h>

#include <string>
#include <vector>

namespace ferry::torchrec::detail {

// Unique wire names of the units: "<feature>@<column offset>".
std::vector<std::string> unit_names(const std::vector<ShardUnit>& units);

// The column permutation putting the units' blocks (in rank order) in (feature, column) order.
PermutePooledEmbeddingsSplit column_order(const std::vector<ShardUnit>& units);

}  // namespace ferry::torchrec::detail
