// table_wise sharding's unit (torchrec's tw_sharding): a whole table placed on one rank acts as
// a table of its own there. Column-wise (cw_sharding.h) and table-column-wise (twcw_sharding.h)
// reuse it with a column range as the "table", as torchrec's column-wise sharding builds on its
// table-wise base: so this header is what the three types share.
//
// The unit of the input dist is one (shard, feature of its table) pair, ordered by the shard's
// rank; the KJTAllToAll's splits are the units per rank and the pooled output all-to-all's
// dims per rank are their widths summed.
#pragma once

#include <ferry/collectives/torchrec/modules/embedding_lookup.h>
#include <ferry/collectives/torchrec/sharding/embedding_sharding.h>

#include <memory>
#include <string>
#include <vector>

namespace ferry::torchrec {

namespace detail {
// One (shard, feature) pair: the unit a table-wise / column-wise input dist moves.
struct ShardUnit {
  int feature = 0;       // position in the collection's feature list
  std::string key;       // the feature name
  int rank = 0;          // where the shard lives
  int64_t col_offset = 0, width = 0;
  PoolingType pooling = PoolingType::Sum;
  std::shared_ptr<EmbeddingTable> table;  // on this rank only
};
// The units of the given tables' shards of width `width` (0: any), sorted by rank (stable).
std::vector<ShardUnit> shard_units(const ShardedTables& tables, const std::vector<int>& table_ids,
                                   int64_t width);

// The number of units each of the W ranks holds (the input all-to-all's splits).
std::vector<int64_t> units_per_rank(const std::vector<ShardUnit>& units, int W);
// The summed widths of each rank's units (the pooled output all-to-all's dims per rank).
std::vector<int64_t> dims_per_rank(const std::vector<ShardUnit>& units, int W);
// [rank][unit of that rank]: the units' widths (the VBE all-to-all's dims per rank per feature).
std::vector<std::vector<int64_t>> unit_widths_per_rank(const std::vector<ShardUnit>& units, int W);
// The units' feature names, in unit order (the keys the input dist selects).
std::vector<std::string> unit_keys(const std::vector<ShardUnit>& units);
// The lookups of the units on `rank`, the i-th reading key i of the received KJT; `pooled`:
// each pools by its feature's pooling.
std::vector<FeatureLookup> unit_lookups(const std::vector<ShardUnit>& units, int rank,
                                        bool pooled);
// The element type of the given tables (Float32 for none).
DType tables_dtype(const ShardedTables& tables, const std::vector<int>& ids);
}  // namespace detail

}  // namespace ferry::torchrec
