// Per-sample weights that require grad through a sharded EmbeddingBagCollection: for every sharding
// type, W = 1..4, SUM and MEAN, float64, the gradient the caller's weights Variable receives from
// ShardedEmbeddingBagCollection::forward(kjt, w) with each rank's loss equals the one
// EmbeddingBagCollection::forward(kjt, w) gives for the same loss on the rank's own batch (relative
// 1e-12), and so does the forward. torchrec's KJTAllToAll drops this gradient for every type but
// data_parallel; ferry routes it back (weights_dist.h). Also: ranks that disagree on whether the
// weights require grad, and weights given to an unweighted collection or of the wrong size, are
// refused on every rank before any payload moves.
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

constexpr uint64_t kSeed = 77;



// This rank's weighted batch of B samples (0..3 ids per bag) plus a key no table serves.
KeyedJaggedTensor batch(int rank, int64_t B) {
  std::mt19937_64 rng(4242 + 31 * static_cast<uint64_t>(rank));
  std::vector<std::string> keys;
  std::vector<int64_t> rows;
  for (const auto& s : small_tables())
    for (const auto& f : s.features) {
      keys.push_back(f);
      rows.push_back(s.rows);
    }
  keys.push_back("extra");
  rows.push_back(4);
  std::vector<int64_t> lengths, ids;
  std::vector<double> weights;
  for (int64_t r : rows)
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = static_cast<int64_t>(rng() % 4);
      lengths.push_back(n);
      for (int64_t j = 0; j < n; ++j) {
        ids.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(r)));
        weights.push_back(0.3 + static_cast<double>(rng() % 1000) / 700.0);
      }
    }
  return KeyedJaggedTensor::from_lengths_sync(keys, from_vector(ids), from_vector(lengths),
                                              from_vector(weights));
}

// sum(y * G) / B with a fixed G of the rank.
Variable loss(const Variable& y, int rank) {
  std::vector<double> g;
  const int64_t n = y.value().numel();
  for (int64_t i = 0; i < n; ++i) g.push_back(std::cos(0.37 * static_cast<double>(i) + rank));
  return div(sum(mul(y, Variable(from_vector<double>(g, y.value().shape())))),
             static_cast<double>(y.value().size(0)));
}



}  // namespace

DG_CASE("ShardedEmbeddingBagCollection per-sample weights that require grad get the gradient "
        "of the unsharded collection on the rank's batch, every sharding type",
        "[torchrec][sharded][weights]", 1, 2, 3, 4) {
  const int W = g.size(), me = g.rank();
  const int L = W % 2 == 0 ? W / 2 : W;
  const int64_t B = 3;
  for (ShardingType type :
       {ShardingType::DATA_PARALLEL, ShardingType::TABLE_WISE, ShardingType::COLUMN_WISE,
        ShardingType::TABLE_COLUMN_WISE, ShardingType::ROW_WISE, ShardingType::TABLE_ROW_WISE})
    for (PoolingType pooling : {PoolingType::Sum, PoolingType::Mean}) {
      const std::string what = cat_str(to_string(type), pooling == PoolingType::Sum ? " SUM" : " MEAN");
      ShardedEmbeddingBagCollection sharded(small_configs(pooling), true, small_plan(type, W, L), g,
                                            {.local_size = L}, std::nullopt, kSeed);
      EmbeddingBagCollection ref(small_configs(pooling), true, kSeed);
      const KeyedJaggedTensor kjt = batch(me, B);
      Variable ws(kjt.weights().clone(), true), wr(kjt.weights().clone(), true);
      const PooledEmbeddings ys = sharded.forward(kjt, ws);
      const PooledEmbeddings yr = ref.forward(kjt, wr);
      expect(testing::max_rel_err(ys.values.value(), yr.values.value()) <= 1e-12, g,
             what + ": the forward differs from the unsharded one");
      loss(ys.values, me).backward();
      loss(yr.values, me).backward();
      expect(ws.grad().defined(), g, what + ": the weights got no gradient");
      const double e = testing::max_rel_err(ws.grad(), wr.grad());
      expect(e <= 1e-12, g, cat_str(what, ": weights gradient relative error ", e));
    }
}

DG_CASE("ShardedEmbeddingBagCollection per-sample weights refused on every rank when the "
        "ranks disagree on requires_grad, the collection is unweighted, or the size is wrong",
        "[torchrec][sharded][weights]", 1, 2, 3) {
  const int W = g.size(), me = g.rank();
  const KeyedJaggedTensor kjt = batch(me, 2);
  ShardedEmbeddingBagCollection weighted(small_configs(PoolingType::Sum), true,
                                         small_plan(ShardingType::TABLE_WISE, W, W), g,
                                         {.local_size = W}, std::nullopt, kSeed);
  if (W > 1) {
    const Variable w(kjt.weights().clone(), /*requires_grad=*/me == 0);
    expect_invalid([&] { weighted.forward(kjt, w); },
                   {"ShardedEmbeddingBagCollection::input_dist", "disagree", "rank(s) 0"}, g,
                   "ranks disagreeing on requires_grad");
  }
  const Variable short_w(kjt.weights().narrow(0, 0, kjt.weights().numel() - 1).clone(), true);
  expect_invalid([&] { weighted.forward(kjt, me == W - 1 ? short_w : Variable(kjt.weights(), true)); },
                 {cat_str("rank ", W - 1, "'s input"), "per_sample_weights",
                  cat_str("(", batch(W - 1, 2).values().numel(), ")")},
                 g, "weights of the wrong size");
  ShardedEmbeddingBagCollection unweighted(small_configs(PoolingType::Sum), false,
                                           small_plan(ShardingType::ROW_WISE, W, W), g,
                                           {.local_size = W}, std::nullopt, kSeed);
  expect_invalid([&] { unweighted.forward(kjt, Variable(kjt.weights(), true)); },
                 {"unweighted collection"}, g, "weights given to an unweighted collection");
}
