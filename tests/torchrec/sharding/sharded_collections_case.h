// The tables, batches, plans and checks the sharded-collection tests share: float64 tables whose
// rows are not multiples of W (uneven row blocks), each rank's random batch of ids and weights
// (with a key no table serves), the one-type and mixed plans, the loss the sharded step trains.
#pragma once

#include <ferry/autograd/ops.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/differentiable/spmd_gradcheck.h"
#include "tests/torchrec/sharded_test_util.h"
#include "tests/torchrec/sharding/small_tables_case.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace ferry::torchrec::testing::collections {

using dgtest::expect;

template <class... A>
std::string str(const A&... a) {
  return cat_str(a...);
}

inline constexpr uint64_t kSeed = 1234;

// Tables: (name, rows, dim, features). Rows not multiples of W, so row blocks are uneven.
using TableSpec = SmallTable;

inline const std::vector<TableSpec>& bag_specs() { return small_tables(); }
inline const std::vector<TableSpec>& mixed_specs() {
  static const std::vector<TableSpec> s{{"t0", 11, 4, {"f0", "f1"}}, {"t1", 7, 3, {"f2"}},
                                        {"t2", 9, 5, {"f3"}},        {"t3", 13, 2, {"f4"}},
                                        {"t4", 6, 3, {"f5"}},        {"t5", 10, 4, {"f6"}}};
  return s;
}
inline const std::vector<TableSpec>& seq_specs() {  // one dim (EmbeddingCollection)
  static const std::vector<TableSpec> s{{"t0", 11, 4, {"f0", "f1"}}, {"t1", 7, 4, {"f2"}},
                                        {"t2", 9, 4, {"f3"}}};
  return s;
}

inline std::vector<EmbeddingBagConfig> bag_configs(const std::vector<TableSpec>& specs,
                                                   PoolingType pooling) {
  std::vector<EmbeddingBagConfig> out;
  for (const auto& s : specs)
    out.push_back({.name = s.name, .num_embeddings = s.rows, .embedding_dim = s.dim,
                   .feature_names = s.features, .pooling = pooling,
                   .data_type = DType::Float64});
  return out;
}
inline std::vector<EmbeddingConfig> seq_configs(const std::vector<TableSpec>& specs) {
  std::vector<EmbeddingConfig> out;
  for (const auto& s : specs)
    out.push_back({.name = s.name, .num_embeddings = s.rows, .embedding_dim = s.dim,
                   .feature_names = s.features, .data_type = DType::Float64});
  return out;
}
inline std::vector<TableShape> shapes(const std::vector<TableSpec>& specs) {
  std::vector<TableShape> out;
  for (const auto& s : specs) out.push_back({s.name, s.rows, s.dim});
  return out;
}

// One rank's batch: per key, per sample, the ids (and weights). An extra key "extra" that no
// table serves rides along (ignored, as torchrec does).
struct IdBatch {
  std::vector<std::string> keys;
  std::vector<std::vector<std::vector<int64_t>>> ids;    // [key][sample][i]
  std::vector<std::vector<std::vector<double>>> weights;  // the same shape
};

inline IdBatch make_batch(const std::vector<TableSpec>& specs, int64_t B, int rank, int step,
                          uint64_t salt = 0) {
  std::mt19937_64 rng(1000003ULL * static_cast<uint64_t>(step) + 7919ULL * static_cast<uint64_t>(rank) + salt);
  IdBatch b;
  std::vector<int64_t> rows;
  for (const auto& s : specs)
    for (const auto& f : s.features) {
      b.keys.push_back(f);
      rows.push_back(s.rows);
    }
  b.keys.push_back("extra");
  rows.push_back(5);
  for (int64_t r : rows) {
    b.ids.emplace_back();
    b.weights.emplace_back();
    for (int64_t i = 0; i < B; ++i) {
      const int64_t n = static_cast<int64_t>(rng() % 4);  // 0..3 ids, empty bags included
      b.ids.back().emplace_back();
      b.weights.back().emplace_back();
      for (int64_t j = 0; j < n; ++j) {
        b.ids.back().back().push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(r)));
        b.weights.back().back().push_back(0.25 + static_cast<double>(rng() % 1000) / 800.0);
      }
    }
  }
  return b;
}

// The KJT of several ranks' batches concatenated rank-major (one batch: that rank's KJT).
inline KeyedJaggedTensor to_kjt(const std::vector<IdBatch>& batches, bool weighted) {
  std::vector<int64_t> lengths, values;
  std::vector<double> weights;
  const auto& keys = batches.front().keys;
  for (size_t k = 0; k < keys.size(); ++k)
    for (const IdBatch& b : batches)
      for (size_t s = 0; s < b.ids[k].size(); ++s) {
        lengths.push_back(static_cast<int64_t>(b.ids[k][s].size()));
        values.insert(values.end(), b.ids[k][s].begin(), b.ids[k][s].end());
        weights.insert(weights.end(), b.weights[k][s].begin(), b.weights[k][s].end());
      }
  return KeyedJaggedTensor::from_lengths_sync(keys, from_vector(values), from_vector(lengths),
                                              weighted ? from_vector(weights) : Tensor());
}

inline std::vector<IdBatch> batches_of(const std::vector<TableSpec>& specs, int64_t B, int W, int step,
                                       uint64_t salt = 0) {
  std::vector<IdBatch> out;
  for (int r = 0; r < W; ++r) out.push_back(make_batch(specs, B, r, step, salt));
  return out;
}

// Every rank's batch size in the equivalence tests: 3, or (uneven, as an uneven last batch
// makes them) 3, 2, 1, 3, ... by rank.
inline std::vector<int64_t> batch_sizes(int W, bool uneven) {
  std::vector<int64_t> out;
  for (int r = 0; r < W; ++r) out.push_back(uneven ? 3 - r % 3 : 3);
  return out;
}
inline int64_t rows_before(const std::vector<int64_t>& sizes, int rank) {
  int64_t n = 0;
  for (int r = 0; r < rank; ++r) n += sizes[static_cast<size_t>(r)];
  return n;
}

// A fixed "target" G for the loss, [rows, cols], from (salt, first row).
inline Tensor target(int64_t rows, int64_t cols, int64_t first_row, uint64_t salt) {
  std::vector<double> v;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      v.push_back(std::sin(0.7 * static_cast<double>(first_row + r) + 1.3 * static_cast<double>(c) +
                           static_cast<double>(salt)));
  return from_vector<double>(v, {rows, cols});
}

// Each rank's loss: sum(y * (0.5 y + G)) / n, n = its number of samples (global: W * B).
inline Variable loss_of(const Variable& y, const Tensor& G, int64_t n) {
  return div(sum(mul(y, add(mul(y, 0.5), Variable(G)))), static_cast<double>(n));
}

inline double rel_err(const Tensor& a, const Tensor& b) { return testing::max_rel_err(a, b); }

inline void expect_rel(const Tensor& a, const Tensor& b, const Group& g, const std::string& what,
                       double tol = 1e-12) {
  expect(a.shape() == b.shape(), g, what + ": shapes " + shape_str(a.shape()) + " vs " +
                                        shape_str(b.shape()));
  const double e = rel_err(a, b);
  expect(e <= tol, g, str(what, ": relative error ", e, " > ", tol));
}

inline void expect_same(const Tensor& a, const Tensor& b, const Group& g, const std::string& what) {
  expect(a.shape() == b.shape() && rel_err(a, b) == 0.0, g,
         str(what, ": not bit-identical (relative error ", rel_err(a, b), ")"));
}

inline int local_size_for(int W) { return W % 2 == 0 ? W / 2 : W; }

inline ModuleShardingPlan uniform_plan(const std::vector<TableSpec>& specs, ShardingType type, int W,
                                       int L) {
  std::map<std::string, ParameterShardingGenerator> gens;
  for (size_t i = 0; i < specs.size(); ++i) gens[specs[i].name] = table_generator(type, i, W, L);
  return construct_module_sharding_plan(shapes(specs), gens, W, L);
}

// Mixed: t0 table_wise, t1 row_wise, t2 column_wise, t3 table_row_wise, t4 data_parallel,
// t5 table_column_wise (sequence: t3 row_wise, t5 column_wise).
inline ModuleShardingPlan mixed_plan(int W, int L, bool sequence,
                                     const std::vector<TableSpec>& specs = mixed_specs()) {
  const int G = W / L;
  std::map<std::string, ParameterShardingGenerator> gens{
      {"t0", table_wise(W - 1)},
      {"t1", row_wise()},
      {"t2", column_wise({0, W / 2})},
      {"t3", sequence ? row_wise() : table_row_wise(G - 1)},
      {"t4", data_parallel()},
      {"t5", sequence ? column_wise({W - 1, 0}) : table_column_wise(0)}};
  return construct_module_sharding_plan(shapes(specs), gens, W, L);
}

inline FusedOptimizerConfig optimizer(bool adagrad) {
  FusedOptimizerConfig c;
  c.optimizer = adagrad ? EmbOptimType::ExactAdagrad : EmbOptimType::Sgd;
  c.learning_rate = adagrad ? 0.05 : 0.3;
  return c;
}

inline bool has_type(const ModuleShardingPlan& plan, ShardingType t) {
  for (const auto& [name, ps] : plan)
    if (ps.sharding_type == t) return true;
  return false;
}

// Whether every table's summation order is that of the unsharded lookup (no row split).
inline bool same_order(const ModuleShardingPlan& plan) {
  return !has_type(plan, ShardingType::ROW_WISE) && !has_type(plan, ShardingType::TABLE_ROW_WISE);
}

}  // namespace ferry::torchrec::testing::collections
