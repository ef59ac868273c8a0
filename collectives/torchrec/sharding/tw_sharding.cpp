#include <ferry/collectives/torchrec/sharding/tw_sharding.h>

#include <algorithm>

namespace ferry::torchrec::detail {

std::vector<ShardUnit> shard_units(const ShardedTables& tables, const std::vector<int>& table_ids,
                                   int64_t width) {
  const int me = tables.world().rank();
  std::vector<ShardUnit> units;
  int first_feature = 0;
  for (const ShardedTable& t : tables.tables()) {
    const int nf = static_cast<int>(t.config.feature_names.size());
    if (std::find(table_ids.begin(), table_ids.end(), t.index) != table_ids.end()) {
      size_t local = 0;  // t.shards / t.tables hold this rank's shards in spec order
      for (const ShardMetadata& m : t.sharding.sharding_spec) {
        std::shared_ptr<EmbeddingTable> mine;
        if (m.placement == me) mine = t.tables.at(local++);
        if (width > 0 && m.cols() != width) continue;
        for (int f = 0; f < nf; ++f)
          units.push_back({first_feature + f, t.config.feature_names[static_cast<size_t>(f)],
                           m.placement, m.col_offset(), m.cols(), t.config.pooling, mine});
      }
    }
    first_feature += nf;
  }
  std::stable_sort(units.begin(), units.end(),
                   [](const ShardUnit& a, const ShardUnit& b) { return a.rank < b.rank; });
  return units;
}

std::vector<int64_t> units_per_rank(const std::vector<ShardUnit>& units, int W) {
  std::vector<int64_t> n(static_cast<size_t>(W), 0);
  for (const auto& u : units) ++n[static_cast<size_t>(u.rank)];
  return n;
}

std::vector<int64_t> dims_per_rank(const std::vector<ShardUnit>& units, int W) {
  std::vector<int64_t> n(static_cast<size_t>(W), 0);
  for (const auto& u : units) n[static_cast<size_t>(u.rank)] += u.width;
  return n;
}

std::vector<std::vector<int64_t>> unit_widths_per_rank(const std::vector<ShardUnit>& units, int W) {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(W));
  for (const auto& u : units) out[static_cast<size_t>(u.rank)].push_back(u.width);
  return out;
}

std::vector<std::string> unit_keys(const std::vector<ShardUnit>& units) {
  std::vector<std::string> keys;
  for (const auto& u : units) keys.push_back(u.key);
  return keys;
}

std::vector<FeatureLookup> unit_lookups(const std::vector<ShardUnit>& units, int rank,
                                        bool pooled) {
  std::vector<FeatureLookup> lookups;
  for (const auto& u : units)
    if (u.rank == rank) {
      FeatureLookup l{.table = u.table,
                      .feature = u.key,
                      .key_index = static_cast<int64_t>(lookups.size())};
      if (pooled) l.pooling = u.pooling;
      lookups.push_back(std::move(l));
    }
  return lookups;
}

DType tables_dtype(const ShardedTables& tables, const std::vector<int>& ids) {
  return ids.empty() ? DType::Float32
                     : tables.tables()[static_cast<size_t>(ids.front())].config.data_type;
}

}  // namespace ferry::torchrec::detail
