// Small helpers shared by the sharded-collection tests that describe their tables as a list of
// (name, rows, dim), each table looked up by one feature "f<name>".
#pragma once

#include <ferry/collectives/torchrec/torchrec.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

namespace ferry::torchrec::testing {

using TableList = std::vector<std::tuple<std::string, int64_t, int64_t>>;

// SUM-pooled bag configs of `dtype`, feature "f<name>" each.
inline std::vector<EmbeddingBagConfig> bag_configs_of(const TableList& tables, DType dtype) {
  std::vector<EmbeddingBagConfig> c;
  for (const auto& [name, rows, dim] : tables)
    c.push_back({.name = name, .num_embeddings = rows, .embedding_dim = dim,
                 .feature_names = {"f" + name}, .pooling = PoolingType::Sum, .data_type = dtype});
  return c;
}

inline std::vector<TableShape> shapes_of(const TableList& tables) {
  std::vector<TableShape> s;
  for (const auto& [name, rows, dim] : tables) s.push_back({name, rows, dim});
  return s;
}

// max |a - b| / max |b| over the elements (max |a - b| when b is all zeros).
inline double max_rel_err(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    num = std::max(num, std::abs(a.get_flat(i) - b.get_flat(i)));
    den = std::max(den, std::abs(b.get_flat(i)));
  }
  return den > 0 ? num / den : num;
}

}  // namespace ferry::torchrec::testing
