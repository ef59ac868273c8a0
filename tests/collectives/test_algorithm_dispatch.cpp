// The algorithm table is the dispatch: for every collective, each algorithm the table lists
// (Native only where the transport has collectives of its own) is forced in turn, and the
// group's run counts (GroupImpl::runs) must show that exactly that algorithm ran, once per op,
// for every form of the collective; without an override, the automatic choice ran. Results are
// checked too, by the same helpers as the other suites.
//
// Local worlds set the override once around run_checked, as every rank thread shares it; under
// mpiexec (and the UCX launcher) each process sets its own, and every op is waited for before
// the next override, so all ranks issue each op under the same one.
#include "checks.h"
#include "spmd_case.h"

#include <ferry/collectives/engine/group_impl.h>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace ftest;

namespace {

using ferry::Algorithm;
using ferry::Collective;

OpCase small_case(DType dt, int64_t rows, ReduceOp op, int root, uint64_t salt,
                  int variant = 0) {
  OpCase c;
  c.dtype = dt;
  c.rows = rows;
  c.inner = 0;
  c.op = op;
  c.root = root;
  c.variant = variant;
  c.salt = salt;
  return c;
}

// all_to_all_single with layouts: one element of `input` to each rank, gathered in rank order.
void layout_all_to_all(Ctx& ctx, const Group& g) {
  const int W = g.size();
  Tensor in = ferry::empty({W}, DType::Float32);
  Tensor out = ferry::zeros({W}, DType::Float32);
  for (int k = 0; k < W; ++k) in.data<float>()[k] = static_cast<float>(100 * g.rank() + k);
  std::vector<ferry::BlockLayout> send(W), recv(W);
  for (int k = 0; k < W; ++k) {
    send[k] = {ferry::StridedRun{k, 1, 1, 0}};
    recv[k] = {ferry::StridedRun{k, 1, 1, 0}};
  }
  ferry::all_to_all_single(in, send, out, recv, g).wait();
  std::vector<double> expected(W);
  for (int k = 0; k < W; ++k) expected[k] = 100.0 * k + g.rank();
  ctx.expect_tensor("all_to_all_single with layouts", out, DType::Float32, {W}, expected);
}

// Every form of collective `c`, each checked; returns how many ops it issued.
int run_forms(Collective c, Ctx& ctx, const Group& g) {
  const int W = g.size();
  const DType f = DType::Float32;
  int ops = 0;
  auto run = [&](Starter start, const OpCase& oc) {
    run_case(ctx, g, start, oc);
    ++ops;
  };
  switch (c) {
    case Collective::AllReduce:
      // Small enough for the direct exchange started at issue, and a widened 16-bit sum.
      run(start_all_reduce, small_case(f, 37, ReduceOp::Sum, 0, 1));
      run(start_all_reduce, small_case(DType::Float16, 5, ReduceOp::Avg, 0, 2));
      break;
    case Collective::Reduce:
      run(start_reduce, small_case(f, 37, ReduceOp::Sum, W - 1, 1));
      break;
    case Collective::ReduceScatter:
      run(start_reduce_scatter, small_case(f, 5, ReduceOp::Sum, 0, 1));
      run(start_reduce_scatter_v, small_case(f, 5, ReduceOp::Max, 0, 2));
      run(start_reduce_scatter_v, small_case(f, 5, ReduceOp::Sum, 0, 3, /*list form*/ 1));
      break;
    case Collective::AllGather:
      run(start_all_gather, small_case(f, 5, ReduceOp::Sum, 0, 1));
      run(start_all_gather_v, small_case(f, 5, ReduceOp::Sum, 0, 2));
      run(start_all_gather_v_exchanged, small_case(f, 5, ReduceOp::Sum, 0, 3));
      break;
    case Collective::AllToAll:
      run(start_all_to_all_single, small_case(f, 5, ReduceOp::Sum, 0, 1));
      run(start_all_to_all_single_v, small_case(f, 5, ReduceOp::Sum, 0, 2));
      run(start_all_to_all, small_case(f, 5, ReduceOp::Sum, 0, 3));
      layout_all_to_all(ctx, g);
      ++ops;
      break;
    case Collective::Broadcast:
      run(start_broadcast, small_case(f, 37, ReduceOp::Sum, W - 1, 1));
      break;
    case Collective::Gather:
      run(start_gather, small_case(f, 5, ReduceOp::Sum, W / 2, 1));
      break;
    case Collective::Scatter:
      run(start_scatter, small_case(f, 5, ReduceOp::Sum, W - 1, 1));
      break;
    case Collective::Barrier:
      run(start_barrier, small_case(f, 0, ReduceOp::Sum, 0, 1));
      break;
  }
  return ops;
}

// Runs every form of `c` and checks that `expected` ran each of its ops and nothing else did.
void expect_dispatch(Collective c, Algorithm expected, Ctx& ctx, const Group& g) {
  ferry::detail::GroupImpl& impl = g.impl();
  std::vector<uint64_t> before(ferry::kAlgorithmCount);
  for (size_t a = 0; a < ferry::kAlgorithmCount; ++a)
    before[a] = impl.runs(c, static_cast<Algorithm>(a));
  const int ops = run_forms(c, ctx, g);
  for (size_t a = 0; a < ferry::kAlgorithmCount; ++a) {
    const Algorithm algo = static_cast<Algorithm>(a);
    const uint64_t ran = impl.runs(c, algo) - before[a];
    const uint64_t want = algo == expected ? static_cast<uint64_t>(ops) : 0;
    ctx.expect(ran == want, [&] {
      return std::string(ferry::collective_name(c)) + " on rank " + std::to_string(g.rank()) +
             ": expected " + ferry::algorithm_name(expected) + " to run " +
             std::to_string(ops) + " ops, but " + ferry::algorithm_name(algo) + " ran " +
             std::to_string(ran);
    });
  }
}

// The algorithms a test can force for `c` on `g`: Native only with native collectives.
std::vector<Algorithm> forcible(Collective c, bool native) {
  std::vector<Algorithm> out;
  for (Algorithm a : ferry::algorithms_for(c))
    if (a != Algorithm::Native || native) out.push_back(a);
  return out;
}

std::string spec_of(Collective c, Algorithm a) {
  return std::string(ferry::collective_name(c)) + ":" + ferry::algorithm_name(a);
}

// The automatic choice for the forms run_forms issues: what the table answers for them
// (all_reduce's small payloads take one rule; the other collectives have one per transport).
Algorithm automatic_for(Collective c, const Group& g) {
  return ferry::choose_algorithm(c, 37 * sizeof(float), g.size(), g.impl().native() != nullptr);
}

// Under mpiexec or the UCX launcher: one process per rank, each with its own override.
void spmd_dispatch(Collective c, Group& g, Ctx& ctx) {
  expect_dispatch(c, automatic_for(c, g), ctx, g);
  for (Algorithm a : forcible(c, g.impl().native() != nullptr)) {
    ScopedAlgorithm o(spec_of(c, a));
    expect_dispatch(c, a, ctx, g);
  }
}

// On local worlds of several sizes: every rank thread shares the override, set around them.
void local_dispatch(Collective c) {
  for (int world : {1, 2, 3, 4}) {
    INFO("world size " << world);
    run_checked(world, [c](Group& g, Ctx& ctx) {
      // (All_reduce's small ops pick the direct exchange here, the others their one algorithm.)
      expect_dispatch(c, automatic_for(c, g), ctx, g);
    });
    for (Algorithm a : forcible(c, false)) {
      INFO("override " << spec_of(c, a));
      ScopedAlgorithm o(spec_of(c, a));
      run_checked(world, [c, a](Group& g, Ctx& ctx) { expect_dispatch(c, a, ctx, g); });
    }
  }
}

}  // namespace

#define FT_DISPATCH_CASE(coll, name)                                                        \
  [[maybe_unused]] static const bool FT_SPMD_CONCAT(ft_dispatch_, __LINE__) =               \
      ::spmd::add({"algorithm dispatch: " name, "[algorithms][dispatch]",                   \
                   [](::ftest::Group& g) {                                                  \
                     ::ftest::Ctx ctx(g.size());                                            \
                     spmd_dispatch(coll, g, ctx);                                           \
                     std::string why;                                                       \
                     for (const std::string& m : ctx.messages()) why += "\n  " + m;         \
                     if (ctx.failures() > 0 || ctx.checks() == 0)                           \
                       throw ::spmd::Failed(std::to_string(ctx.failures()) +                \
                                            " check(s) failed:" + why);                     \
                   }});                                                                     \
  TEST_CASE("algorithm dispatch: " name, "[algorithms][dispatch]") { local_dispatch(coll); }

FT_DISPATCH_CASE(Collective::AllReduce, "all_reduce")
FT_DISPATCH_CASE(Collective::Reduce, "reduce")
FT_DISPATCH_CASE(Collective::ReduceScatter, "reduce_scatter")
FT_DISPATCH_CASE(Collective::AllGather, "all_gather")
FT_DISPATCH_CASE(Collective::AllToAll, "all_to_all")
FT_DISPATCH_CASE(Collective::Broadcast, "broadcast")
FT_DISPATCH_CASE(Collective::Gather, "gather")
FT_DISPATCH_CASE(Collective::Scatter, "scatter")
FT_DISPATCH_CASE(Collective::Barrier, "barrier")
