// Sharded embedding collections' state and their refusals: gathered full tables, local shards
// with offsets, a full-table state resharded from W = 4 to 2 and 3; bad input (ids out of range,
// missing features or weights, plans that do not fit the tables or the world or disagree across
// ranks, a batch's context of another kind of module) raising the same error on every rank
// before any payload moves.
// SPMD cases: local worlds in test_torchrec, mpiexec / ferry-run in the torchrec-{mpi,ucx}-*
// suites.
#include <ferry/autograd/ops.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/comm_test_helpers.h"
#include "tests/torchrec/sharded_test_util.h"
#include "tests/torchrec/sharding/sharded_collections_case.h"
#include "tests/differentiable/spmd_gradcheck.h"

#include <limits>
#include <map>
#include <string>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec;
using namespace ferry::torchrec::testing::collections;
using dgtest::expect;
using trtest::expect_invalid;

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
  // A negative id, and the greatest int64 (no arithmetic on it may overflow), likewise.
  for (const int64_t id : {int64_t{-3}, std::numeric_limits<int64_t>::max()}) {
    IdBatch n = make_batch(bag_specs(), 2, me, 0);
    if (me == bad) n.ids[2][0] = {0, id};
    expect_invalid([&] { s.forward(to_kjt({n}, false)); },
                   {str("rank ", bad), "table \"t1\"", "feature \"f2\"", str("id ", id),
                    "sample 0"},
                   g, "id out of range");
  }
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

DG_CASE("sharded EBC / EC modules: each makes a context of its own kind, and refuses the other "
        "kind's before any payload moves",
        "[torchrec][sharded][context]", 1, 2) {
  const int W = g.size(), me = g.rank(), L = local_size_for(W);
  auto ebc = std::make_shared<ShardedEmbeddingBagCollection>(
      bag_configs(bag_specs(), PoolingType::Sum), false,
      uniform_plan(bag_specs(), ShardingType::TABLE_WISE, W, L), g,
      ShardedEmbeddingOptions{.local_size = L}, std::nullopt, kSeed);
  auto ec = std::make_shared<ShardedEmbeddingCollection>(
      seq_configs(seq_specs()), uniform_plan(seq_specs(), ShardingType::TABLE_WISE, W, L), g,
      ShardedEmbeddingOptions{.local_size = L}, std::nullopt, kSeed);
  ShardedEbcModule bags(ebc);
  ShardedEcModule seqs(ec);
  const std::unique_ptr<ShardedModuleContext> bag_ctx = bags.create_context();
  const std::unique_ptr<ShardedModuleContext> seq_ctx = seqs.create_context();
  expect(dynamic_cast<EmbeddingBagCollectionContext*>(bag_ctx.get()) != nullptr &&
             dynamic_cast<EmbeddingCollectionContext*>(seq_ctx.get()) != nullptr,
         g, "a module's create_context made another kind of context");
  const uint64_t before = g.sequence_number();
  const KeyedJaggedTensor bag_kjt =
      to_kjt({batches_of(bag_specs(), 2, W, 0)[static_cast<size_t>(me)]}, false);
  expect_invalid([&] { bags.input_dist_checked(*seq_ctx, bag_kjt); },
                 {"ShardedModule \"sparse.ebc\"::input_dist_checked", "another kind of module"}, g,
                 "a bag module given a sequence module's context");
  expect_invalid([&] { seqs.compute_and_output_dist(*bag_ctx, {}); },
                 {"ShardedModule \"sparse.ec\"::compute_and_output_dist", "another kind of module"},
                 g, "a sequence module given a bag module's context");
  expect(g.sequence_number() == before, g, "a refused context moved data");
  // The module's own kind runs: its input dist equals the collection's forward.
  auto d = bags.input_dist_checked(*bag_ctx, bag_kjt).wait().wait();
  const EmbeddingModuleOutput out = bags.compute_and_output_dist(*bag_ctx, d).value();
  expect_same(std::get<PooledEmbeddings>(out).values.value(), ebc->forward(bag_kjt).values.value(),
              g, "the staged bag module");
}
