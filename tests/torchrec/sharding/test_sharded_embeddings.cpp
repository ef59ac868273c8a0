// Sharded embedding collections: the equivalence of ShardedEmbeddingBagCollection /
// ShardedEmbeddingCollection with the unsharded collections trained on the concatenated global
// batch: for every sharding type, W = 1..4, weighted and unweighted, SUM and MEAN, forward outputs
// and the tables after k fused-optimizer steps (SGD, element-wise Adagrad), float64, relative error
// <= 1e-12 (forward bit-identical where the summation order is the same); mixed plans; ranks with
// different batch sizes (W = 2, 4, every sharding type); the staged API. (Their state and their
// refusals of bad input: test_sharded_state_and_bad_input.cpp.)
// SPMD cases: local worlds in test_torchrec, mpiexec / ferry-run in the torchrec-{mpi,ucx}-*
// suites.
#include <ferry/autograd/ops.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/comm_test_helpers.h"
#include "tests/torchrec/sharded_test_util.h"
#include "tests/torchrec/sharding/sharded_collections_case.h"
#include "tests/differentiable/spmd_gradcheck.h"

#include <map>
#include <string>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec;
using namespace ferry::torchrec::testing::collections;
using dgtest::expect;

namespace {

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
  EmbeddingBagCollectionContext c0, c1;
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
