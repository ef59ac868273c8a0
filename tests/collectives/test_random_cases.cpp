// Seeded random differential tests: for every raw collective, 200 random cases (world size 1-8,
// dtype, shape with zero sizes, splits, root, reduce op, in-place or not) against the serial
// references of checks.h, on the local transport. The seed is FT_RANDOM_SEED (default 20), printed
// with every failure: rerun with it to reproduce. The mpiexec and UCX suites (tests/mpi, tests/ucx)
// run 16 cases per op on the job's world.
#include "checks.h"
#include "spmd_case.h"
#include "test_helpers.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace ftest {
namespace {

struct RandomOp {
  const char* name;
  Starter start;
  bool reduces;  // takes a reduce op
  bool rooted;
  int variants;
};

const RandomOp kOps[] = {
    {"all_reduce", start_all_reduce, true, false, 3},
    {"reduce", start_reduce, true, true, 2},
    {"reduce_scatter", start_reduce_scatter, true, false, 2},
    {"reduce_scatter_v", start_reduce_scatter_v, true, false, 2},
    {"broadcast", start_broadcast, false, true, 1},
    {"all_gather", start_all_gather, false, false, 2},
    {"all_gather_v", start_all_gather_v, false, false, 1},
    {"all_gather_v (exchanged sizes)", start_all_gather_v_exchanged, false, false, 1},
    {"all_to_all_single", start_all_to_all_single, false, false, 1},
    {"all_to_all_single (splits)", start_all_to_all_single_v, false, false, 1},
    {"all_to_all", start_all_to_all, false, false, 1},
    {"gather", start_gather, false, true, 1},
    {"scatter", start_scatter, false, true, 1},
};

uint64_t seed_from_environment() {
  const char* v = std::getenv("FT_RANDOM_SEED");
  return v == nullptr ? 20 : std::strtoull(v, nullptr, 10);
}

constexpr int kCasesPerOp = 200;
constexpr int kCasesPerWorld = 20;  // one local world runs this many cases in a row

// `count` cases of `op` drawn from `batch_seed` on group g (every rank draws the same ones).
void run_random_batch(Group& g, Ctx& ctx, const RandomOp& op, uint64_t batch_seed, int count) {
  std::mt19937_64 rng(batch_seed);
  rng();  // the world size's draw
  for (int k = 0; k < count; ++k) {
    OpCase c;
    const auto& dtypes = ferry::kAllDTypes;
    c.dtype = dtypes[rng() % std::size(dtypes)];
    const uint64_t size_draw = rng() % 10;
    c.rows = size_draw == 0 ? 0 : static_cast<int64_t>(rng() % (size_draw < 8 ? 9 : 300));
    c.inner = (rng() % 3 == 0) ? static_cast<int64_t>(rng() % 4) : 0;
    const std::vector<ReduceOp> ops = ops_for(c.dtype);
    const ReduceOp drawn = ops[rng() % ops.size()];
    c.op = op.reduces ? drawn : ReduceOp::Sum;
    c.root = static_cast<int>(rng() % static_cast<uint64_t>(g.size()));
    if (!op.rooted) c.root = 0;
    c.variant = static_cast<int>(rng() % static_cast<uint64_t>(op.variants));
    c.salt = rng() % 1000;
    run_case(ctx, g, op.start, c);
  }
}

uint64_t batch_seed_of(uint64_t seed, const RandomOp& op, int batch) {
  return mix64(seed ^ mix64(std::hash<std::string>{}(op.name)) ^
               mix64(static_cast<uint64_t>(batch) + 1));
}

// On the job's world under mpiexec / ferry-run (tests/mpi, tests/ucx): 16 cases per op, 208
// per run, so that every transport and launch mode runs at least 200 random cases in its
// collective suite at a cost that fits CI (the world size is the job's).
constexpr int kCasesPerOpOnJob = 16;

[[maybe_unused]] const bool kRandomOnJobRegistered = register_spmd_case(
    "random: every raw collective against its serial reference, 16 seeded cases each on the "
    "job's world",
    "[random]", [](Group& g, Ctx& ctx) {
      const uint64_t seed = seed_from_environment();
      for (const RandomOp& op : kOps) {
        const size_t failed = ctx.failures();
        run_random_batch(g, ctx, op, batch_seed_of(seed, op, 0), kCasesPerOpOnJob);
        if (ctx.failures() > failed)
          ctx.fail("FT_RANDOM_SEED=" + std::to_string(seed) + " op " + op.name + " world " +
                   std::to_string(g.size()) + ": the failures above");
      }
    });

}  // namespace

TEST_CASE("random: every raw collective against its serial reference, 200 seeded cases each",
          "[random]") {
  const uint64_t seed = seed_from_environment();
  for (const RandomOp& op : kOps) {
    for (int batch = 0; batch < kCasesPerOp / kCasesPerWorld; ++batch) {
      // Everything a batch does follows from (seed, op, batch): every rank thread draws the
      // same cases from its own generator.
      const uint64_t batch_seed = batch_seed_of(seed, op, batch);
      std::mt19937_64 world_rng(batch_seed);
      const int world = 1 + static_cast<int>(world_rng() % 8);
      INFO("FT_RANDOM_SEED=" << seed << " op " << op.name << " batch " << batch << " world "
                             << world);
      run_checked(world, [&](Group& g, Ctx& ctx) {
        run_random_batch(g, ctx, op, batch_seed, kCasesPerWorld);
      });
    }
  }
}

}  // namespace ftest
