// Seeded random differential tests of the differentiable collectives: for every op, 200 random
// cases (world size 1-8, float32 / float64, shapes with zero-size dims and 0-d inputs, uneven row
// counts, split lists, roots, reduce ops, both adjoint conventions) whose forward is compared with
// the serial reference and whose backward, seeded with a random output gradient on every rank, with
// the reference adjoint (random_reference.h), on the local transport. Values are small integers, so
// sums are exact in float32 and the max / min tie rule (the lowest rank holding the extreme takes
// the gradient) is exercised often.
// The seed is FT_RANDOM_SEED (default 20), printed with every failure: rerun with it to
// reproduce.
#include <ferry/collectives/differentiable/all_to_all_async.h>
#include <ferry/collectives/differentiable/differentiable.h>
#include <ferry/collectives/run_ranks.h>
#include "random_reference.h"
#include "spmd_gradcheck.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

using namespace ferry;
using namespace rdtest;

namespace {

uint64_t seed_from_environment() {
  const char* v = std::getenv("FT_RANDOM_SEED");
  return v == nullptr ? 20 : std::strtoull(v, nullptr, 10);
}

uint64_t mix64(uint64_t x) {  // splitmix64's finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

constexpr int kCasesPerOp = 200;
constexpr int kCasesPerWorld = 20;  // one local world runs this many cases in a row

const Kind kKinds[] = {Kind::AllReduce,     Kind::Replicate,      Kind::AllGather,
                       Kind::AllGatherV,    Kind::ReduceScatter,  Kind::ReduceScatterV,
                       Kind::AllToAll,      Kind::AllToAllSplit,  Kind::AllToAllAsync,
                       Kind::Broadcast,     Kind::Scatter,        Kind::Gather};

int64_t small(std::mt19937_64& rng, int64_t zero_one_in, int64_t most) {
  return rng() % static_cast<uint64_t>(zero_one_in) == 0
             ? 0
             : 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(most));
}

// Every rank draws the same case from its copy of the batch's generator.
Case draw(std::mt19937_64& rng, Kind kind, int world) {
  Case c;
  c.kind = kind;
  c.world = world;
  c.dtype = rng() % 2 ? DType::Float64 : DType::Float32;
  const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};
  c.op = ops[rng() % 4];
  c.adjoint = rng() % 2 ? Adjoint::Replicated : Adjoint::PerRank;
  c.root = static_cast<int>(rng() % static_cast<uint64_t>(world));
  c.m = small(rng, 5, 3);
  const int ndim = static_cast<int>(rng() % 3);
  for (int d = 0; d < ndim; ++d) c.trailing.push_back(small(rng, 6, 3));
  c.scalar = (kind == Kind::AllReduce || kind == Kind::Replicate || kind == Kind::Broadcast) &&
             rng() % 6 == 0;
  if (kind == Kind::AllGatherV || kind == Kind::ReduceScatterV)
    for (int k = 0; k < world; ++k) c.rows.push_back(small(rng, 4, 3));
  if (kind == Kind::AllToAllSplit || kind == Kind::AllToAllAsync) {
    c.splits.assign(static_cast<size_t>(world), {});
    for (auto& row : c.splits)
      for (int j = 0; j < world; ++j) row.push_back(small(rng, 4, 2));
  }
  return c;
}

// Small integers in [-8, 8]: every sum the tests make is exact in float32.
Values random_values(const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Values v{shape, {}};
  for (int64_t i = 0; i < shape_numel(shape); ++i)
    v.v.push_back(static_cast<double>(static_cast<int>(rng() % 17) - 8));
  return v;
}

Tensor to_tensor(const Values& v, DType dtype) { return from_vector<double>(v.v, v.shape).to(dtype); }

// "" when `got` is `want` (within one rounding of float32 / float64 for avg's division).
std::string difference(const Tensor& got, const Values& want, DType dtype) {
  if (!got.defined()) return "undefined";
  if (got.dtype() != dtype) return std::string("dtype ") + dtype_name(got.dtype());
  if (got.shape() != want.shape)
    return "shape " + shape_str(got.shape()) + ", expected " + shape_str(want.shape);
  const double rtol = dtype == DType::Float32 ? 1e-6 : 1e-13;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double a = got.get_flat(i), b = want.v[static_cast<size_t>(i)];
    if (!(std::abs(a - b) <= rtol * std::abs(b)))
      return "element " + std::to_string(i) + " is " + std::to_string(a) + ", expected " +
             std::to_string(b) + " (" + got.to_string() + ")";
  }
  return "";
}

bool all_zero(const Values& v) {
  for (double x : v.v)
    if (x != 0.0) return false;
  return true;
}

Variable call(const Case& c, const Variable& x, const Group& g) {
  const int me = g.rank();
  std::vector<int64_t> in_splits, out_splits;
  if (!c.splits.empty()) {
    in_splits = c.splits[static_cast<size_t>(me)];
    for (int k = 0; k < c.world; ++k) out_splits.push_back(c.splits[k][me]);
  }
  switch (c.kind) {
    case Kind::AllReduce: return all_reduce(x, g, c.op, c.adjoint);
    case Kind::Replicate: return replicate(x, g);
    case Kind::AllGather: return all_gather(x, g, c.adjoint);
    case Kind::AllGatherV: return all_gather_v(x, g, c.adjoint);
    case Kind::ReduceScatter: return reduce_scatter(x, g);
    case Kind::ReduceScatterV: return reduce_scatter_v(x, c.rows, g);
    case Kind::AllToAll: return all_to_all_single(x, g);
    case Kind::AllToAllSplit: return all_to_all_single(x, out_splits, in_splits, g);
    case Kind::AllToAllAsync:
      return all_to_all_single_async(x, out_splits, in_splits, g).wait();
    case Kind::Broadcast: return broadcast(x, c.root, g, c.adjoint);
    case Kind::Scatter: return scatter(x, c.root, g);
    case Kind::Gather: return gather(x, c.root, g);
  }
  return {};
}

// One case on this rank: forward against the reference, then backward.
void run_case(const Case& c, uint64_t case_seed, Group& g, const std::string& where) {
  const int me = g.rank();
  std::vector<Values> xs, gs;
  for (int k = 0; k < c.world; ++k)
    xs.push_back(random_values(input_shape(c, k), mix64(case_seed ^ (2 * k + 1))));
  const std::vector<Values> ys = reference_forward(c, xs);
  for (int k = 0; k < c.world; ++k)
    gs.push_back(random_values(output_shape(c, k), mix64(case_seed ^ (2 * k + 2) << 20)));
  const std::vector<Values> dxs = reference_backward(c, xs, gs);

  const std::string what = where + ": " + c.describe();
  Variable x(to_tensor(xs[me], c.dtype), true, "x");
  Variable y = call(c, x, g);
  const std::string fwd = difference(y.value(), ys[me], c.dtype);
  dgtest::expect(fwd.empty(), g, what + ": forward: " + fwd);
  y.backward(to_tensor(gs[me], c.dtype));
  // A rank whose input gets no gradient may keep grad() undefined.
  if (!x.grad().defined() && all_zero(dxs[me])) return;
  const std::string bwd = difference(x.grad(), dxs[me], c.dtype);
  dgtest::expect(bwd.empty(), g, what + ": gradient: " + bwd);
}

// On the job's world under mpiexec / ferry-run (the differentiable-mpi-* and -ucx-* suites):
// 17 seeded cases per op, 204 per run, so that every transport and launch mode runs at least
// 200 random cases at a cost that fits CI (the world size is the job's).
constexpr int kCasesPerOpOnJob = 17;

[[maybe_unused]] const bool kRandomOnJobRegistered = dgtest::register_case(
    "random: every differentiable collective against serial references, 17 seeded cases each "
    "on the job's world",
    "[random]",
    [](Group& g) {
      const uint64_t seed = seed_from_environment();
      size_t ran = 0;
      for (Kind kind : kKinds) {
        const uint64_t batch_seed =
            mix64(seed ^ mix64(static_cast<uint64_t>(kind) + 101) ^ mix64(g.size() + 1000));
        std::mt19937_64 rng(batch_seed);
        for (int k = 0; k < kCasesPerOpOnJob; ++k) {
          const Case c = draw(rng, kind, g.size());
          run_case(c, mix64(batch_seed + static_cast<uint64_t>(k) + 1), g,
                   "FT_RANDOM_SEED=" + std::to_string(seed) + " on the job's world, case " +
                       std::to_string(k));
          ++ran;
        }
      }
      const size_t expected = std::size(kKinds) * kCasesPerOpOnJob;
      dgtest::expect(ran == expected, g,
                     "ran " + std::to_string(ran) + " random cases, expected " +
                         std::to_string(expected));
    },
    {1, 2, 3, 4, 5, 6, 7, 8});

}  // namespace

TEST_CASE("random: every differentiable collective, forward and adjoint against serial "
          "references, 200 seeded cases each",
          "[random]") {
  const uint64_t seed = seed_from_environment();
  for (Kind kind : kKinds) {
    for (int batch = 0; batch < kCasesPerOp / kCasesPerWorld; ++batch) {
      // Everything a batch does follows from (seed, op, batch).
      const uint64_t batch_seed =
          mix64(seed ^ mix64(static_cast<uint64_t>(kind) + 101) ^ mix64(batch + 1));
      const int world = 1 + static_cast<int>(mix64(batch_seed) % 8);
      INFO("FT_RANDOM_SEED=" << seed << " op " << kind_name(kind) << " batch " << batch
                             << " world " << world);
      REQUIRE_NOTHROW(run_ranks(world, [&](Group& g) {
        std::mt19937_64 rng(batch_seed);
        for (int k = 0; k < kCasesPerWorld; ++k) {
          const Case c = draw(rng, kind, world);
          const uint64_t case_seed = mix64(batch_seed + static_cast<uint64_t>(k) + 1);
          run_case(c, case_seed, g,
                   "FT_RANDOM_SEED=" + std::to_string(seed) + " batch " + std::to_string(batch) +
                       " case " + std::to_string(k));
        }
      }));
    }
  }
}
