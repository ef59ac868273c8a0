// The three float64 bag tables (t0 11x4 for f0 and f1, t1 7x3 for f2, t2 9x5 for f3) and the
// one-type plans that the per-sample-weights and VBE tests of the sharded EBC share.
#pragma once

#include <ferry/collectives/torchrec/torchrec.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace ferry::torchrec::testing {

struct SmallTable {
  std::string name;
  int64_t rows, dim;
  std::vector<std::string> features;
};

inline const std::vector<SmallTable>& small_tables() {
  static const std::vector<SmallTable> s{{"t0", 11, 4, {"f0", "f1"}}, {"t1", 7, 3, {"f2"}},
                                         {"t2", 9, 5, {"f3"}}};
  return s;
}

inline std::vector<EmbeddingBagConfig> small_configs(PoolingType pooling) {
  std::vector<EmbeddingBagConfig> out;
  for (const auto& s : small_tables())
    out.push_back({.name = s.name, .num_embeddings = s.rows, .embedding_dim = s.dim,
                   .feature_names = s.features, .pooling = pooling, .data_type = DType::Float64});
  return out;
}

inline std::vector<TableShape> small_shapes() {
  std::vector<TableShape> out;
  for (const auto& s : small_tables()) out.push_back({s.name, s.rows, s.dim});
  return out;
}

// The plan generator of `type` for table i of a world of W ranks with L per node: table_wise /
// column shards rotated over the ranks (up to 3 column shards; a rank may hold two of one
// table), node-wise types on node i % (W / L).
inline ParameterShardingGenerator table_generator(ShardingType type, size_t i, int W, int L) {
  const int G = W / L;
  const int k = static_cast<int>(i);
  switch (type) {
    case ShardingType::DATA_PARALLEL: return data_parallel();
    case ShardingType::TABLE_WISE: return table_wise(k % W);
    case ShardingType::COLUMN_WISE: {
      std::vector<int> ranks;
      for (int j = 0; j < std::min(3, W + 1); ++j) ranks.push_back((k + j) % W);
      return column_wise(ranks);
    }
    case ShardingType::TABLE_COLUMN_WISE: return table_column_wise(k % G);
    case ShardingType::ROW_WISE: return row_wise();
    case ShardingType::TABLE_ROW_WISE: return table_row_wise(k % G);
  }
  return data_parallel();
}

// Every table of `type` (table_generator).
inline ModuleShardingPlan small_plan(ShardingType type, int W, int L) {
  std::map<std::string, ParameterShardingGenerator> gens;
  for (size_t i = 0; i < small_tables().size(); ++i)
    gens[small_tables()[i].name] = table_generator(type, i, W, L);
  return construct_module_sharding_plan(small_shapes(), gens, W, L);
}

template <class... A>
std::string cat_str(const A&... a) {
  std::ostringstream os;
  (os << ... << a);
  return os.str();
}

}  // namespace ferry::torchrec::testing
