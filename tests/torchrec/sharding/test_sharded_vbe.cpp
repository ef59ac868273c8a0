// Variable batch per feature (VBE) through ShardedEmbeddingBagCollection: every rank gives each
// feature its own batch (stride_per_key_per_rank) and inverse_indices expanding it to B_out output
// samples. For every sharding type (table_row_wise through its reduce-scatter within the node and
// variable-batch all-to-all across), W = 1..4, SUM and MEAN, weighted and not, float64: the
// forward equals the unsharded EmbeddingBagCollection on the concatenation of every rank's VBE
// batch (rank r's rows), and after k fused SGD steps with each rank's mean loss the tables equal
// the unsharded ones trained with the mean loss over all W * B_out rows (relative 1e-12). A VBE
// KJT without inverse_indices and VBE into a sharded EmbeddingCollection are refused on every
// rank, naming op, rank and sharding type.
#include <ferry/autograd/ops.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/comm_test_helpers.h"
#include "tests/torchrec/sharded_test_util.h"
#include "small_tables_case.h"
#include "tests/differentiable/spmd_gradcheck.h"

#include <cmath>
#include <random>
#include <sstream>

using namespace ferry;
using namespace ferry::torchrec;
using dgtest::expect;
using trtest::expect_invalid;
using testing::cat_str;
using testing::small_configs;
using testing::small_plan;
using testing::small_shapes;
using testing::small_tables;

namespace {

constexpr uint64_t kSeed = 99;
constexpr int64_t kOut = 4;  // B_out: output samples per rank


// One rank's VBE batch: per key its own batch of bags, and B_out inverse indices per key.
struct VbeBatch {
  std::vector<std::string> keys;
  std::vector<std::vector<std::vector<int64_t>>> ids;    // [key][sample][i]
  std::vector<std::vector<std::vector<double>>> weights;
  std::vector<std::vector<int64_t>> inverse;              // [key][B_out]
};

VbeBatch make_batch(int rank, int step) {
  std::mt19937_64 rng(7919ULL * static_cast<uint64_t>(rank) + 104729ULL * static_cast<uint64_t>(step) + 5);
  VbeBatch b;
  std::vector<int64_t> rows;
  for (const auto& s : small_tables())
    for (const auto& f : s.features) {
      b.keys.push_back(f);
      rows.push_back(s.rows);
    }
  b.keys.push_back("extra");  // served by no table: ignored
  rows.push_back(3);
  for (size_t k = 0; k < rows.size(); ++k) {
    const int64_t B = 1 + static_cast<int64_t>((static_cast<size_t>(rank) + k + static_cast<size_t>(step)) % 3);
    b.ids.emplace_back();
    b.weights.emplace_back();
    for (int64_t s = 0; s < B; ++s) {
      const int64_t n = static_cast<int64_t>(rng() % 4);
      b.ids.back().emplace_back();
      b.weights.back().emplace_back();
      for (int64_t j = 0; j < n; ++j) {
        b.ids.back().back().push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(rows[k])));
        b.weights.back().back().push_back(0.25 + static_cast<double>(rng() % 1000) / 900.0);
      }
    }
    b.inverse.emplace_back();
    for (int64_t o = 0; o < kOut; ++o)
      b.inverse.back().push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(B)));
  }
  return b;
}

// The VBE KJT of several ranks' batches concatenated rank-major (key k: every rank's samples in
// rank order; inverse indices shifted by the batches before).
KeyedJaggedTensor to_kjt(const std::vector<VbeBatch>& batches, bool weighted,
                         bool with_inverse = true) {
  const auto& keys = batches.front().keys;
  std::vector<int64_t> lengths, values;
  std::vector<double> weights;
  std::vector<std::vector<int64_t>> spkpr(keys.size());
  std::vector<int64_t> inverse;
  for (size_t k = 0; k < keys.size(); ++k) {
    int64_t before = 0;
    for (const VbeBatch& b : batches) {
      spkpr[k].push_back(static_cast<int64_t>(b.ids[k].size()));
      for (size_t s = 0; s < b.ids[k].size(); ++s) {
        lengths.push_back(static_cast<int64_t>(b.ids[k][s].size()));
        values.insert(values.end(), b.ids[k][s].begin(), b.ids[k][s].end());
        weights.insert(weights.end(), b.weights[k][s].begin(), b.weights[k][s].end());
      }
      for (int64_t i : b.inverse[k]) inverse.push_back(before + i);
      before += static_cast<int64_t>(b.ids[k].size());
    }
  }
  std::optional<InverseIndices> inv;
  if (with_inverse)
    inv = InverseIndices{keys, from_vector<int64_t>(inverse, {static_cast<int64_t>(keys.size()),
                                                              static_cast<int64_t>(batches.size()) * kOut})};
  return KeyedJaggedTensor::from_lengths_sync(keys, from_vector(values), from_vector(lengths),
                                              weighted ? from_vector(weights) : Tensor(),
                                              std::nullopt, spkpr, inv);
}

Tensor target(int64_t rows, int64_t cols, int64_t first_row) {
  std::vector<double> v;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      v.push_back(std::sin(0.9 * static_cast<double>(first_row + r) + 1.7 * static_cast<double>(c)));
  return from_vector<double>(v, {rows, cols});
}
// sum(y * (0.5 y + G)) / n
Variable loss_of(const Variable& y, const Tensor& G, int64_t n) {
  return div(sum(mul(y, add(mul(y, 0.5), Variable(G)))), static_cast<double>(n));
}



void vbe_equivalence(const Group& g, const ModuleShardingPlan& plan, int L, bool weighted,
                     PoolingType pooling, bool has_dp, const std::string& what) {
  const int W = g.size(), me = g.rank();
  FusedOptimizerConfig opt;
  opt.learning_rate = 0.3;
  ShardedEmbeddingBagCollection sharded(small_configs(pooling), weighted, plan, g, {.local_size = L},
                                        opt, kSeed);
  EmbeddingBagCollection ref(small_configs(pooling), weighted, kSeed, opt);
  int64_t cols = 0;
  for (int64_t d : ref.length_per_key()) cols += d;
  for (int step = 0; step < 2; ++step) {
    std::vector<VbeBatch> all;
    for (int r = 0; r < W; ++r) all.push_back(make_batch(r, step));
    const PooledEmbeddings ys = sharded.forward(to_kjt({all[static_cast<size_t>(me)]}, weighted));
    const PooledEmbeddings yr = ref.forward(to_kjt(all, weighted));
    expect(ys.values.value().shape() == Shape{kOut, cols}, g, what + ": output shape");
    const double e = testing::max_rel_err(ys.values.value(), yr.values.value().narrow(0, me * kOut, kOut));
    expect(e <= 1e-12, g, cat_str(what, " step ", step, ": forward relative error ", e));
    loss_of(ys.values, target(kOut, cols, me * kOut), kOut).backward();
    if (has_dp) sharded.step_data_parallel();
    loss_of(yr.values, target(W * kOut, cols, 0), W * kOut).backward();
  }
  const auto got = sharded.state_dict();
  for (const auto& [key, t] : ref.state_dict()) {
    const double e = testing::max_rel_err(got.at(key), t);
    expect(e <= 1e-12, g, cat_str(what, ": table ", key, " after 2 steps, relative error ", e));
  }
}

}  // namespace

DG_CASE("ShardedEmbeddingBagCollection with a variable batch per feature (VBE) equals the "
        "unsharded collection, forward and 2 fused SGD steps, every VBE sharding type",
        "[torchrec][sharded][vbe]", 1, 2, 3, 4) {
  const int W = g.size();
  const int L = W % 2 == 0 ? W / 2 : W;
  for (ShardingType type : {ShardingType::DATA_PARALLEL, ShardingType::TABLE_WISE,
                            ShardingType::COLUMN_WISE, ShardingType::TABLE_COLUMN_WISE,
                            ShardingType::ROW_WISE, ShardingType::TABLE_ROW_WISE})
    for (PoolingType pooling : {PoolingType::Sum, PoolingType::Mean})
      for (bool weighted : {false, true})
        vbe_equivalence(g, small_plan(type, W, L), L, weighted, pooling,
                        type == ShardingType::DATA_PARALLEL,
                        cat_str(to_string(type), pooling == PoolingType::Sum ? " SUM" : " MEAN",
                            weighted ? " weighted" : ""));
}

DG_CASE("ShardedEmbeddingBagCollection VBE, a mixed plan and weights requiring grad",
        "[torchrec][sharded][vbe]", 1, 2, 3, 4) {
  const int W = g.size(), me = g.rank();
  const int L = W % 2 == 0 ? W / 2 : W;
  const ModuleShardingPlan mixed = construct_module_sharding_plan(
      small_shapes(), {{"t0", row_wise()}, {"t1", data_parallel()}, {"t2", column_wise({W - 1, 0})}},
      W, L);
  vbe_equivalence(g, mixed, L, true, PoolingType::Mean, true, "mixed");
  // The weights' gradient through a VBE input dist equals the unsharded one on the rank's batch.
  for (ShardingType type :
       {ShardingType::TABLE_WISE, ShardingType::ROW_WISE, ShardingType::TABLE_ROW_WISE}) {
    ShardedEmbeddingBagCollection sharded(small_configs(PoolingType::Sum), true, small_plan(type, W, L), g,
                                          {.local_size = L}, std::nullopt, kSeed);
    EmbeddingBagCollection ref(small_configs(PoolingType::Sum), true, kSeed);
    const KeyedJaggedTensor kjt = to_kjt({make_batch(me, 3)}, true);
    Variable ws(kjt.weights().clone(), true), wr(kjt.weights().clone(), true);
    const Variable ys = sharded.forward(kjt, ws).values;
    const Variable yr = ref.forward(kjt, wr).values;
    const Tensor G = target(kOut, ys.value().size(1), me);
    loss_of(ys, G, kOut).backward();
    loss_of(yr, G, kOut).backward();
    const double e = testing::max_rel_err(ws.grad(), wr.grad());
    expect(e <= 1e-12, g, cat_str(to_string(type), " VBE weights gradient relative error ", e));
  }
}

DG_CASE("ShardedEmbeddingBagCollection VBE refused without inverse indices, and by a sharded "
        "EmbeddingCollection", "[torchrec][sharded][vbe]", 1, 2, 4) {
  const int W = g.size(), me = g.rank();
  const int L = W % 2 == 0 ? W / 2 : W;
  ShardedEmbeddingBagCollection tw(small_configs(PoolingType::Sum), false,
                                   small_plan(ShardingType::TABLE_WISE, W, L), g, {.local_size = L},
                                   std::nullopt, kSeed);
  expect_invalid([&] { tw.forward(to_kjt({make_batch(me, 0)}, false, /*with_inverse=*/me != W - 1)); },
                 {"ShardedEmbeddingBagCollection::input_dist", cat_str("rank ", W - 1), "inverse_indices"},
                 g, "VBE without inverse indices");
  // Sequence embeddings: torchrec's ShardedEmbeddingCollection raises for VBE too.
  std::vector<EmbeddingConfig> seq;
  for (const auto& s : small_tables())
    seq.push_back({.name = s.name, .num_embeddings = s.rows, .embedding_dim = 4,
                   .feature_names = s.features, .data_type = DType::Float64});
  std::vector<TableShape> seq_shapes;
  for (const auto& s : small_tables()) seq_shapes.push_back({s.name, s.rows, 4});
  ShardedEmbeddingCollection ec(seq, construct_module_sharding_plan(
                                         seq_shapes, {{"t0", row_wise()}, {"t1", table_wise(0)},
                                                      {"t2", data_parallel()}}, W, L),
                                g, {.local_size = L}, std::nullopt, kSeed);
  expect_invalid([&] { ec.forward(to_kjt({make_batch(me, 0)}, false)); },
                 {"ShardedEmbeddingCollection::input_dist", "rank 0's input", "VBE",
                  "EmbeddingCollection", "row_wise"},
                 g, "VBE with a sharded EmbeddingCollection");
  // The group is still usable: a good VBE batch goes through.
  const PooledEmbeddings y = tw.forward(to_kjt({make_batch(me, 1)}, false));
  expect(y.values.value().size(0) == kOut, g, "the VBE forward after the refusals");
}
