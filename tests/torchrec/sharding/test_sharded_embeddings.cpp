// Sharded embedding collections: the equivalence of ShardedEmbeddingBagCollection /
// ShardedEmbeddingCollection with the unsharded collections trained on the concatenated global
// batch: for every sharding type, W = 1..4, weighted and unweighted, SUM and MEAN, forward outputs
// and the tables after k fused-optimizer steps (SGD, element-wise Adagrad), float64, relative error
// <= 1e-12 (forward bit-identical where the summation order is the same); mixed plans; ranks with
// different batch sizes (W = 2, 4, every sharding type); the staged API; state (gathered, local shards, resharding from W = 4 to 2 and 3); bad input on every rank.
// SPMD cases: local worlds in test_torchrec, mpiexec / ferry-run in the torchrec-{mpi,ucx}-*
// suites.
#include <ferry/autograd/ops.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/comm_test_helpers.h"
#include "tests/torchrec/sharded_test_util.h"
#include "tests/differentiable/spmd_gradcheck.h"

#include <cmath>
#include <functional>
#include <random>
#include <sstream>

using namespace ferry;
using namespace ferry::torchrec;
using dgtest::expect;
using trtest::expect_invalid;

namespace {

template <class... A>
std::string str(const A&... a) {
  std::ostringstream os;
  (os << ... << a);
  return os.str();
}

constexpr uint64_t kSeed = 1234;

// Tables: (name, rows, dim, features). Rows not multiples of W, so row blocks are uneven.
struct TableSpec {
  std::string name;
  int64_t rows, dim;
  std::vector<std::string> features;
};

const std::vector<TableSpec>& bag_specs() {
  static const std::vector<TableSpec> s{{"t0", 11, 4, {"f0", "f1"}}, {"t1", 7, 3, {"f2"}},
                                        {"t2", 9, 5, {"f3"}}};
  return s;
}
const std::vector<TableSpec>& mixed_specs() {
  static const std::vector<TableSpec> s{{"t0", 11, 4, {"f0", "f1"}}, {"t1", 7, 3, {"f2"}},
                                        {"t2", 9, 5, {"f3"}},        {"t3", 13, 2, {"f4"}},
                                        {"t4", 6, 3, {"f5"}},        {"t5", 10, 4, {"f6"}}};
  return s;
}
const std::vector<TableSpec>& seq_specs() {  // one dim (EmbeddingCollection)
  static const std::vector<TableSpec> s{{"t0", 11, 4, {"f0", "f1"}}, {"t1", 7, 4, {"f2"}},
                                        {"t2", 9, 4, {"f3"}}};
  return s;
}

std::vector<EmbeddingBagConfig> bag_configs(const std::vector<TableSpec>& specs,
                                            PoolingType pooling) {
  std::vector<EmbeddingBagConfig> out;
  for (const auto& s : specs)
    out.push_back({.name = s.name, .num_embeddings = s.rows, .embedding_dim = s.dim,
                   .feature_names = s.features, .pooling = pooling,
                   .data_type = DType::Float64});
  return out;
}
std::vector<EmbeddingConfig> seq_configs(const std::vector<TableSpec>& specs) {
  std::vector<EmbeddingConfig> out;
  for (const auto& s : specs)
    out.push_back({.name = s.name, .num_embeddings = s.rows, .embedding_dim = s.dim,
                   .feature_names = s.features, .data_type = DType::Float64});
  return out;
}
std::vector<TableShape> shapes(const std::vector<TableSpec>& specs) {
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

IdBatch make_batch(const std::vector<TableSpec>& specs, int64_t B, int rank, int step,
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
KeyedJaggedTensor to_kjt(const std::vector<IdBatch>& batches, bool weighted) {
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

std::vector<IdBatch> batches_of(const std::vector<TableSpec>& specs, int64_t B, int W, int step,
                              uint64_t salt = 0) {
  std::vector<IdBatch> out;
  for (int r = 0; r < W; ++r) out.push_back(make_batch(specs, B, r, step, salt));
  return out;
}

// Every rank's batch size in the equivalence tests: 3, or (uneven, as an uneven last batch
// makes them) 3, 2, 1, 3, ... by rank.
std::vector<int64_t> batch_sizes(int W, bool uneven) {
  std::vector<int64_t> out;
  for (int r = 0; r < W; ++r) out.push_back(uneven ? 3 - r % 3 : 3);
  return out;
}
int64_t rows_before(const std::vector<int64_t>& sizes, int rank) {
  int64_t n = 0;
  for (int r = 0; r < rank; ++r) n += sizes[static_cast<size_t>(r)];
  return n;
}

// A fixed "target" G for the loss, [rows, cols], from (salt, first row).
Tensor target(int64_t rows, int64_t cols, int64_t first_row, uint64_t salt) {
  std::vector<double> v;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      v.push_back(std::sin(0.7 * static_cast<double>(first_row + r) + 1.3 * static_cast<double>(c) +
                           static_cast<double>(salt)));
  return from_vector<double>(v, {rows, cols});
}

// Each rank's loss: sum(y * (0.5 y + G)) / n, n = its number of samples (global: W * B).
Variable loss_of(const Variable& y, const Tensor& G, int64_t n) {
  return div(sum(mul(y, add(mul(y, 0.5), Variable(G)))), static_cast<double>(n));
}

double rel_err(const Tensor& a, const Tensor& b) { return testing::max_rel_err(a, b); }

void expect_rel(const Tensor& a, const Tensor& b, const Group& g, const std::string& what,
                double tol = 1e-12) {
  expect(a.shape() == b.shape(), g, what + ": shapes " + shape_str(a.shape()) + " vs " +
                                        shape_str(b.shape()));
  const double e = rel_err(a, b);
  expect(e <= tol, g, str(what, ": relative error ", e, " > ", tol));
}

void expect_same(const Tensor& a, const Tensor& b, const Group& g, const std::string& what) {
  expect(a.shape() == b.shape() && rel_err(a, b) == 0.0, g,
         str(what, ": not bit-identical (relative error ", rel_err(a, b), ")"));
}

int local_size_for(int W) { return W % 2 == 0 ? W / 2 : W; }

// The plan generator of `type` for table i of a world of W ranks with L per node.
ParameterShardingGenerator generator(ShardingType type, size_t i, int W, int L) {
  const int G = W / L;
  switch (type) {
    case ShardingType::DATA_PARALLEL: return data_parallel();
    case ShardingType::TABLE_WISE: return table_wise(static_cast<int>(i) % W);
    case ShardingType::COLUMN_WISE: {
      std::vector<int> ranks;  // up to 3 shards, rotated, a rank may repeat
      for (int j = 0; j < std::min(3, W + 1); ++j) ranks.push_back((static_cast<int>(i) + j) % W);
      return column_wise(ranks);
    }
    case ShardingType::TABLE_COLUMN_WISE: return table_column_wise(static_cast<int>(i) % G);
    case ShardingType::ROW_WISE: return row_wise();
    case ShardingType::TABLE_ROW_WISE: return table_row_wise(static_cast<int>(i) % G);
  }
  return data_parallel();
}

ModuleShardingPlan uniform_plan(const std::vector<TableSpec>& specs, ShardingType type, int W,
                                int L) {
  std::map<std::string, ParameterShardingGenerator> gens;
  for (size_t i = 0; i < specs.size(); ++i) gens[specs[i].name] = generator(type, i, W, L);
  return construct_module_sharding_plan(shapes(specs), gens, W, L);
}

// Mixed: t0 table_wise, t1 row_wise, t2 column_wise, t3 table_row_wise, t4 data_parallel,
// t5 table_column_wise (sequence: t3 row_wise, t5 column_wise).
ModuleShardingPlan mixed_plan(int W, int L, bool sequence,
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

FusedOptimizerConfig optimizer(bool adagrad) {
  FusedOptimizerConfig c;
  c.optimizer = adagrad ? EmbOptimType::ExactAdagrad : EmbOptimType::Sgd;
  c.learning_rate = adagrad ? 0.05 : 0.3;
  return c;
}

bool has_type(const ModuleShardingPlan& plan, ShardingType t) {
  for (const auto& [name, ps] : plan)
    if (ps.sharding_type == t) return true;
  return false;
}

// Whether every table's summation order is that of the unsharded lookup (no row split).
bool same_order(const ModuleShardingPlan& plan) {
  return !has_type(plan, ShardingType::ROW_WISE) && !has_type(plan, ShardingType::TABLE_ROW_WISE);
}

// The EBC equivalence: k steps of the sharded collection on each rank's batch vs the unsharded
// one on the global batch (rank-major) with the loss the sharded step trains: the mean over the
// ranks of each rank's mean loss (with equal batches, the mean over the global batch).
void ebc_equivalence(const Group& g, const std::vector<TableSpec>& specs,
                     const ModuleShardingPlan& plan, int L, bool weighted, PoolingType pooling,
                     bool adagrad, const std::string& what, int steps = 2, bool uneven = false) {
  const int W = g.size(), me = g.rank();
  const std::vector<int64_t> sizes = batch_sizes(W, uneven);
  const int64_t B = sizes[static_cast<size_t>(me)], first = rows_before(sizes, me);
  const auto configs = bag_configs(specs, pooling);
  const FusedOptimizerConfig opt = optimizer(adagrad);
  ShardedEmbeddingBagCollection sharded(configs, weighted, plan, g, {.local_size = L}, opt, kSeed);
  EmbeddingBagCollection ref(configs, weighted, kSeed, opt);
  int64_t cols = 0;
  for (int64_t d : ref.length_per_key()) cols += d;
  for (int step = 0; step < steps; ++step) {
    std::vector<IdBatch> batches;
    for (int r = 0; r < W; ++r)
      batches.push_back(make_batch(specs, sizes[static_cast<size_t>(r)], r, step));
    const KeyedJaggedTensor local = to_kjt({batches[static_cast<size_t>(me)]}, weighted);
    const KeyedJaggedTensor global = to_kjt(batches, weighted);
    PooledEmbeddings ys = sharded.forward(local);
    PooledEmbeddings yr = ref.forward(global);
    expect(ys.keys == yr.keys && ys.length_per_key == yr.length_per_key, g, what + ": keys");
    const Tensor mine = yr.values.value().narrow(0, first, B);
    const std::string at = str(what, " step ", step, " forward");
    if (step == 0 && same_order(plan))
      expect_same(ys.values.value(), mine, g, at);
    else
      expect_rel(ys.values.value(), mine, g, at);
    loss_of(ys.values, target(B, cols, first, 3), B).backward();
    if (has_type(plan, ShardingType::DATA_PARALLEL)) sharded.step_data_parallel();
    Variable lr;
    for (int r = 0; r < W; ++r) {
      const int64_t n = sizes[static_cast<size_t>(r)], at = rows_before(sizes, r);
      const Variable l = loss_of(narrow(yr.values, 0, at, n), target(n, cols, at, 3), W * n);
      lr = lr.defined() ? add(lr, l) : l;
    }
    lr.backward();
  }
  const auto got = sharded.state_dict();
  const auto want = ref.state_dict();
  for (const auto& [key, t] : want) {
    expect(got.count(key) == 1, g, what + ": state_dict lacks " + key);
    expect_rel(got.at(key), t, g, str(what, " ", key, " after ", steps, " steps"));
  }
}

// The EC equivalence (no weights, no pooling).
void ec_equivalence(const Group& g, const std::vector<TableSpec>& specs,
                    const ModuleShardingPlan& plan, int L, bool adagrad, const std::string& what,
                    int steps = 2, bool uneven = false) {
  const int W = g.size(), me = g.rank();
  const std::vector<int64_t> sizes = batch_sizes(W, uneven);
  const int64_t B = sizes[static_cast<size_t>(me)];
  const auto configs = seq_configs(specs);
  const FusedOptimizerConfig opt = optimizer(adagrad);
  ShardedEmbeddingCollection sharded(configs, plan, g, {.local_size = L}, opt, kSeed);
  EmbeddingCollection ref(configs, kSeed, opt);
  const int64_t D = configs.front().embedding_dim;
  for (int step = 0; step < steps; ++step) {
    std::vector<IdBatch> batches;
    for (int r = 0; r < W; ++r)
      batches.push_back(make_batch(specs, sizes[static_cast<size_t>(r)], r, step));
    const KeyedJaggedTensor local = to_kjt({batches[static_cast<size_t>(me)]}, false);
    const KeyedJaggedTensor global = to_kjt(batches, false);
    SequenceEmbeddings ys = sharded.forward(local);
    SequenceEmbeddings yr = ref.forward(global);
    expect(ys.keys == yr.keys, g, what + ": keys");
    Variable ls, lr;
    for (size_t f = 0; f < ys.keys.size(); ++f) {
      // Rank r's ids of feature f sit after the ids of the ranks before it in the global KJT.
      std::vector<int64_t> ids(static_cast<size_t>(W), 0);
      for (int r = 0; r < W; ++r)
        for (const auto& bag : batches[static_cast<size_t>(r)].ids[f])
          ids[static_cast<size_t>(r)] += static_cast<int64_t>(bag.size());
      const int64_t before = rows_before(ids, me), mine = ids[static_cast<size_t>(me)];
      // Copies of the rows: bit-identical while the tables are (step 0); later the tables
      // differ by the rounding of the gradient averaging.
      const Tensor want = yr.values_per_key[f].value().narrow(0, before, mine);
      if (step == 0)
        expect_same(ys.values_per_key[f].value(), want, g, str(what, " forward ", ys.keys[f]));
      else
        expect_rel(ys.values_per_key[f].value(), want, g,
                   str(what, " step ", step, " forward ", ys.keys[f]));
      expect_same(ys.lengths_per_key[f], local[ys.keys[f]].lengths(), g, what + ": lengths");
      const Variable a = loss_of(ys.values_per_key[f], target(mine, D, before, f), B);
      ls = ls.defined() ? add(ls, a) : a;
      for (int r = 0; r < W; ++r) {  // the mean over the ranks of each rank's loss
        const int64_t n = ids[static_cast<size_t>(r)], at = rows_before(ids, r);
        const Variable b = loss_of(narrow(yr.values_per_key[f], 0, at, n), target(n, D, at, f),
                                   W * sizes[static_cast<size_t>(r)]);
        lr = lr.defined() ? add(lr, b) : b;
      }
    }
    ls.backward();
    if (has_type(plan, ShardingType::DATA_PARALLEL)) sharded.step_data_parallel();
    lr.backward();
  }
  const auto got = sharded.state_dict();
  for (const auto& [key, t] : ref.state_dict())
    expect_rel(got.at(key), t, g, str(what, " ", key, " after ", steps, " steps"));
}

const std::vector<ShardingType> kBagTypes{
    ShardingType::DATA_PARALLEL, ShardingType::TABLE_WISE,  ShardingType::COLUMN_WISE,
    ShardingType::TABLE_COLUMN_WISE, ShardingType::ROW_WISE, ShardingType::TABLE_ROW_WISE};

}  // namespace

DG_CASE("sharded EBC: every sharding type equals the unsharded EBC on the global batch "
        "(forward, and the tables after 2 fused steps; weighted / unweighted, SUM / MEAN)",
        "[torchrec][sharded][ebc]", 1, 2, 3, 4) {
  const int W = g.size(), L = local_size_for(W);
  for (ShardingType type : kBagTypes) {
    const ModuleShardingPlan plan = uniform_plan(bag_specs(), type, W, L);
    for (bool weighted : {false, true})
      for (PoolingType pooling : {PoolingType::Sum, PoolingType::Mean})
        ebc_equivalence(g, bag_specs(), plan, L, weighted, pooling, /*adagrad=*/weighted,
                        str(to_string(type), " W=", W, weighted ? " weighted " : " unweighted ",
                            pooling_type_name(pooling)));
  }
}

DG_CASE("sharded EBC: mixed plans (all six types in one collection), SGD and Adagrad",
        "[torchrec][sharded][ebc][mixed]", 2, 3, 4) {
  const int W = g.size(), L = local_size_for(W);
  const ModuleShardingPlan plan = mixed_plan(W, L, false);
  for (bool adagrad : {false, true})
    for (PoolingType pooling : {PoolingType::Sum, PoolingType::Mean})
      ebc_equivalence(g, mixed_specs(), plan, L, /*weighted=*/adagrad, pooling, adagrad,
                      str("mixed W=", W, adagrad ? " adagrad " : " sgd ",
                          pooling_type_name(pooling)),
                      3);
}

DG_CASE("sharded EC: data_parallel, table_wise, column_wise, table_column_wise, row_wise equal "
        "the unsharded EC (forward bit-identical, tables after 2 fused steps), and a mixed plan",
        "[torchrec][sharded][ec]", 1, 2, 3, 4) {
  const int W = g.size(), L = local_size_for(W);
  for (ShardingType type : {ShardingType::DATA_PARALLEL, ShardingType::TABLE_WISE,
                            ShardingType::COLUMN_WISE, ShardingType::TABLE_COLUMN_WISE,
                            ShardingType::ROW_WISE})
    for (bool adagrad : {false, true})
      ec_equivalence(g, seq_specs(), uniform_plan(seq_specs(), type, W, L), L, adagrad,
                     str("EC ", to_string(type), " W=", W, adagrad ? " adagrad" : " sgd"));
  if (W >= 2) {
    std::vector<TableSpec> specs = mixed_specs();
    for (auto& s : specs) s.dim = 4;
    std::map<std::string, ParameterShardingGenerator> gens{
        {"t0", table_wise(W - 1)}, {"t1", row_wise()},      {"t2", column_wise({0, W / 2})},
        {"t3", row_wise()},        {"t4", data_parallel()}, {"t5", column_wise({W - 1, 0, 1})}};
    ec_equivalence(g, specs, construct_module_sharding_plan(shapes(specs), gens, W, L), L, true,
                   str("EC mixed W=", W));
  }
}

DG_CASE("sharded EBC / EC: ranks with different batch sizes (an uneven last batch) equal the "
        "unsharded collections, every sharding type and a mixed plan",
        "[torchrec][sharded][uneven]", 2, 4) {
  const int W = g.size(), L = local_size_for(W);
  for (ShardingType type : kBagTypes) {
    const ModuleShardingPlan plan = uniform_plan(bag_specs(), type, W, L);
    for (bool mean : {false, true})
      ebc_equivalence(g, bag_specs(), plan, L, /*weighted=*/mean,
                      mean ? PoolingType::Mean : PoolingType::Sum, /*adagrad=*/false,
                      str("uneven ", to_string(type), " W=", W, mean ? " weighted MEAN" : " SUM"),
                      2, /*uneven=*/true);
    if (type != ShardingType::TABLE_ROW_WISE)  // no sequence table_row_wise (as torchrec)
      ec_equivalence(g, seq_specs(), uniform_plan(seq_specs(), type, W, L), L, false,
                     str("uneven EC ", to_string(type), " W=", W), 2, /*uneven=*/true);
  }
  ebc_equivalence(g, mixed_specs(), mixed_plan(W, L, false), L, true, PoolingType::Mean, true,
                  str("uneven mixed W=", W), 2, /*uneven=*/true);
}

DG_CASE("sharded EBC: the staged API (input_dist, both waits, compute_and_output_dist) with "
        "the next batch's input dist in flight equals forward",
        "[torchrec][sharded][stages]", 2, 4) {
  const int W = g.size(), me = g.rank(), L = local_size_for(W);
  const ModuleShardingPlan plan = mixed_plan(W, L, false);
  const auto configs = bag_configs(mixed_specs(), PoolingType::Mean);
  ShardedEmbeddingBagCollection staged(configs, true, plan, g, {.local_size = L}, std::nullopt, kSeed);
  EmbeddingBagCollection ref(configs, true, kSeed);
  const auto b0 = batches_of(mixed_specs(), 2, W, 0), b1 = batches_of(mixed_specs(), 2, W, 1);
  ShardedEmbeddingContext c0, c1;
  auto in0 = staged.input_dist(c0, to_kjt({b0[static_cast<size_t>(me)]}, true));
  auto d0 = in0.wait().wait();
  auto in1 = staged.input_dist(c1, to_kjt({b1[static_cast<size_t>(me)]}, true));  // in flight
  LazyAwaitable<PooledEmbeddings> out0 = staged.compute_and_output_dist(c0, d0);
  auto d1 = in1.wait().wait();
  const Tensor y0 = out0.value().values.value();
  const Tensor y1 = staged.compute_and_output_dist(c1, d1).value().values.value();
  expect_rel(y0, ref.forward(to_kjt(b0, true)).values.value().narrow(0, me * 2, 2), g, "batch 0");
  expect_rel(y1, ref.forward(to_kjt(b1, true)).values.value().narrow(0, me * 2, 2), g, "batch 1");
}

DG_CASE("sharded EBC / EC state: gathered full tables, local shards with offsets, and a "
        "full-table state resharded from W = 4 to W = 2 and 3 gives the same forward outputs",
        "[torchrec][sharded][state]", 4) {
  const int W = g.size(), me = g.rank();
  const auto configs = bag_configs(mixed_specs(), PoolingType::Sum);
  ShardedEmbeddingBagCollection s4(configs, false, mixed_plan(W, 2, false), g, {.local_size = 2},
                                   optimizer(false), kSeed);
  // One training step so that the state is not the initial one.
  const auto b = batches_of(mixed_specs(), 2, W, 0);
  PooledEmbeddings y = s4.forward(to_kjt({b[static_cast<size_t>(me)]}, false));
  loss_of(y.values, target(2, y.values.value().size(1), me * 2, 1), 2).backward();
  s4.step_data_parallel();
  const auto full = s4.state_dict();
  // Local shards tile the gathered tables.
  for (const auto& [key, shards] : s4.local_state_dict())
    for (const LocalShard& sh : shards)
      for (int64_t r = 0; r < sh.metadata.rows(); ++r)
        for (int64_t c = 0; c < sh.metadata.cols(); ++c)
          expect(sh.tensor.get_flat(r * sh.metadata.cols() + c) ==
                     full.at(key).get_flat((sh.metadata.row_offset() + r) * full.at(key).size(1) +
                                           sh.metadata.col_offset() + c),
                 g, "local shard of " + key + " differs from the gathered table");
  EmbeddingBagCollection ref(configs, false, kSeed);
  ref.load_state_dict(full);
  for (int n : {2, 3}) {
    Group sub = g.split(me < n ? 0 : 1, me);
    const int Ws = sub.size();
    // Another plan on the smaller world: every table row-wise or column-wise / table-wise.
    std::map<std::string, ParameterShardingGenerator> gens;
    for (size_t i = 0; i < mixed_specs().size(); ++i)
      gens[mixed_specs()[i].name] = i % 2 == 0 ? row_wise() : table_wise(static_cast<int>(i) % Ws);
    ShardedEmbeddingBagCollection s(configs, false,
                                    construct_module_sharding_plan(shapes(mixed_specs()), gens, Ws, Ws),
                                    sub, {.local_size = Ws}, std::nullopt, 99);
    s.load_state_dict(full);
    const int base = me < n ? 0 : n;
    std::vector<IdBatch> bs;
    for (int r = 0; r < Ws; ++r) bs.push_back(make_batch(mixed_specs(), 2, base + r, 5));
    const Tensor got = s.forward(to_kjt({bs[static_cast<size_t>(sub.rank())]}, false)).values.value();
    const Tensor want = ref.forward(to_kjt(bs, false)).values.value().narrow(0, sub.rank() * 2, 2);
    expect_rel(got, want, g, str("resharded to W=", Ws));
    const auto back = s.state_dict();
    for (const auto& [key, t] : full) expect_same(back.at(key), t, g, "state round trip " + key);
  }
  // The EC's state the same way (keys embeddings.<t>.weight).
  std::vector<TableSpec> specs = mixed_specs();
  for (auto& s : specs) s.dim = 4;
  ShardedEmbeddingCollection e4(seq_configs(specs), mixed_plan(W, 2, true, specs), g, {.local_size = 2},
                                std::nullopt, kSeed);
  EmbeddingCollection eref(seq_configs(specs), kSeed);
  const auto es = e4.state_dict();
  for (const auto& [key, t] : eref.state_dict()) expect_same(es.at(key), t, g, "EC state " + key);
}

DG_CASE("sharded EBC: bad input raises the same error on every rank before any payload moves, "
        "and the collection stays usable",
        "[torchrec][sharded][bad_input]", 1, 2, 3) {
  const int W = g.size(), me = g.rank(), L = W;
  const auto configs = bag_configs(bag_specs(), PoolingType::Sum);
  const ModuleShardingPlan plan = uniform_plan(bag_specs(), ShardingType::ROW_WISE, W, L);
  ShardedEmbeddingBagCollection s(configs, false, plan, g, {.local_size = L}, std::nullopt, kSeed);
  const int bad = W - 1;
  // An id out of range on rank `bad` only.
  IdBatch b = make_batch(bag_specs(), 2, me, 0);
  if (me == bad) b.ids[2][1] = {1, 7};  // f2 -> t1 has 7 rows
  expect_invalid([&] { s.forward(to_kjt({b}, false)); },
                 {str("rank ", bad), "table \"t1\"", "feature \"f2\"", "id 7", "sample 1"}, g,
                 "id out of range");
  // A configured feature missing from one rank's KJT.
  {
    IdBatch m = make_batch(bag_specs(), 2, me, 0);
    if (me == 0) {
      m.keys.erase(m.keys.begin() + 3);
      m.ids.erase(m.ids.begin() + 3);
      m.weights.erase(m.weights.begin() + 3);
    }
    expect_invalid([&] { s.forward(to_kjt({m}, false)); }, {"rank 0", "\"f3\"", "missing"}, g,
                   "missing feature");
  }
  // Still usable.
  s.forward(to_kjt({make_batch(bag_specs(), 2, me, 1)}, false));
  // A weighted collection given no weights.
  ShardedEmbeddingBagCollection sw(configs, true, plan, g, {.local_size = L}, std::nullopt, kSeed);
  expect_invalid([&] { sw.forward(to_kjt({make_batch(bag_specs(), 2, me, 0)}, false)); },
                 {"weighted", "no weights"}, g, "weights missing");
  // Plans naming a missing table, lacking a table, or a rank outside the world.
  ModuleShardingPlan extra = plan;
  extra["nope"] = extra.at("t0");
  expect_invalid([&] { ShardedEmbeddingBagCollection(configs, false, extra, g, {.local_size = L}); },
                 {"nope"}, g, "plan naming a missing table");
  ModuleShardingPlan lacking = plan;
  lacking.erase("t1");
  expect_invalid([&] { ShardedEmbeddingBagCollection(configs, false, lacking, g, {.local_size = L}); },
                 {"t1"}, g, "plan lacking a table");
  ModuleShardingPlan far = plan;
  far["t2"] = construct_module_sharding_plan(shapes(bag_specs()),
                                             {{"t0", table_wise(0)}, {"t1", table_wise(0)},
                                              {"t2", table_wise(W)}},
                                             W + 1, 1)
                  .at("t2");
  expect_invalid([&] { ShardedEmbeddingBagCollection(configs, false, far, g, {.local_size = L}); },
                 {"t2", str(W)}, g, "plan naming a rank outside the world");
  // Table-row-wise sequence embeddings are refused.
  expect_invalid(
      [&] {
        ShardedEmbeddingCollection(seq_configs(seq_specs()),
                                   uniform_plan(seq_specs(), ShardingType::TABLE_ROW_WISE, W, L),
                                   g, {.local_size = L});
      },
      {"table_row_wise", "not supported"}, g, "EC table_row_wise");
  // Plans that disagree across ranks: MismatchError on every rank.
  if (W >= 2) {
    ModuleShardingPlan mine = uniform_plan(bag_specs(), ShardingType::TABLE_WISE, W, L);
    if (me == 1) mine = uniform_plan(bag_specs(), ShardingType::ROW_WISE, W, L);
    bool thrown = false;
    try {
      ShardedEmbeddingBagCollection(configs, false, mine, g, {.local_size = L});
    } catch (const MismatchError& e) {
      thrown = std::string(e.what()).find("differ") != std::string::npos;
    }
    expect(thrown, g, "disagreeing plans: no MismatchError");
  }
}
