// The algorithm table is the dispatch: for every collective, each algorithm the table lists
// (the transport's own ways only where it has collectives of its own) is forced in turn, and
// the group's run counts (GroupImpl::runs) must show that exactly that algorithm ran, once per
// op, for every form of the collective; without an override, the automatic choice ran. A
// transport's persistent or exchange way falls to the next for a form or group it does not
// fit (algorithm_table.h): then every op ran one of the transport's ways, and the one forced
// ran for each op that fits it. Results are checked too, by the same helpers as the other
// suites. The automatic choice per collective, size, group size and transport is recorded in
// a table below, as it was before the transport's ways became entries of the table.
//
// Local worlds set the override once around run_checked, as every rank thread shares it; under
// mpiexec (and the UCX launcher) each process sets its own, and every op is waited for before
// the next override, so all ranks issue each op under the same one.
#include "checks.h"
#include "spmd_case.h"

#include <ferry/collectives/engine/group_impl.h>
#include <ferry/runtime/config.h>

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
      // An average with no widening: started at issue as a sum divided once it is done, by
      // shared memory and by MPI's own calls (which have no average).
      run(start_all_reduce, small_case(f, 37, ReduceOp::Avg, 0, 3));
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

// How many of run_forms' ops of `c` the transport's way `a` takes on `g` when forced: each,
// for MPI's call; for its persistent requests, the forms with equal blocks (small here, and all
// blocks on one rank but the all-to-alls' with lists); for
// its exchange, every form but a reduce's, a gather's, a scatter's or a barrier's, in groups of
// 2-4 ranks (broadcast: 2). None when the way is switched off.
int fitting_ops(Collective c, Algorithm a, int ops, const Group& g) {
  const int W = g.size();
  if (a == Algorithm::Native || !ferry::uses_native_collectives(a)) return ops;
  if (a == Algorithm::Persistent) {
    if (!ferry::config().mpi_persistent) return 0;
    switch (c) {
      case Collective::AllReduce: return ops;
      case Collective::Broadcast: return ops;
      case Collective::Barrier: return ops;
      // The equal form; the v-forms have none, but their one block on one rank is equal.
      case Collective::ReduceScatter: return W == 1 ? ops : 1;
      case Collective::AllGather: return W == 1 ? ops : 1;
      case Collective::AllToAll: return 1;       // equal blocks; split lists, lists, layouts not
      default: return 0;
    }
  }
  if (!ferry::config().mpi_exchange || W < 2 || W > 4) return 0;
  if (c == Collective::Broadcast) return W == 2 ? ops : 0;
  return ops;
}

// Shared memory carries all_reduce, reduce, reduce_scatter, all_gather, broadcast and barrier
// in every form run_forms issues (all small: through the slots, which need no reading of the
// peers' memory); the all-to-alls, every form of them, or none where the ranks cannot read
// each other's memory (then the pairwise exchange does).
bool shm_count_fits(Collective c, uint64_t ran, int ops) {
  if (c == Collective::AllToAll) return ran == static_cast<uint64_t>(ops) || ran == 0;
  return ran == static_cast<uint64_t>(ops);
}

// Runs every form of `c` and checks that `expected` ran each of its ops and nothing else did
// (a transport's way that does not fit an op: it ran, the rest ran the transport's others).
void expect_dispatch(Collective c, Algorithm expected, Ctx& ctx, const Group& g) {
  ferry::detail::GroupImpl& impl = g.impl();
  std::vector<uint64_t> before(ferry::kAlgorithmCount);
  for (size_t a = 0; a < ferry::kAlgorithmCount; ++a)
    before[a] = impl.runs(c, static_cast<Algorithm>(a));
  const int ops = run_forms(c, ctx, g);
  if (expected == Algorithm::SharedMemory) {
    uint64_t total = 0;
    for (size_t a = 0; a < ferry::kAlgorithmCount; ++a)
      total += impl.runs(c, static_cast<Algorithm>(a)) - before[a];
    const size_t s = static_cast<size_t>(Algorithm::SharedMemory);
    const uint64_t shm = impl.runs(c, Algorithm::SharedMemory) - before[s];
    ctx.expect(total == static_cast<uint64_t>(ops) && shm_count_fits(c, shm, ops), [&] {
      return std::string(ferry::collective_name(c)) + " on rank " + std::to_string(g.rank()) +
             " with shm chosen for " + std::to_string(ops) + " ops: shm ran " +
             std::to_string(shm) + ", all algorithms " + std::to_string(total);
    });
    return;
  }
  const bool way = ferry::uses_native_collectives(expected);
  const uint64_t fit = static_cast<uint64_t>(fitting_ops(c, expected, ops, g));
  uint64_t ways_ran = 0;
  for (size_t a = 0; a < ferry::kAlgorithmCount; ++a) {
    const Algorithm algo = static_cast<Algorithm>(a);
    const uint64_t ran = impl.runs(c, algo) - before[a];
    if (way && ferry::uses_native_collectives(algo)) {
      ways_ran += ran;
      if (algo != expected) continue;
    }
    const uint64_t want = algo == expected ? fit : 0;
    ctx.expect(ran == want, [&] {
      return std::string(ferry::collective_name(c)) + " on rank " + std::to_string(g.rank()) +
             " with " + ferry::algorithm_name(expected) + " chosen for " + std::to_string(ops) +
             " ops: expected " + ferry::algorithm_name(algo) + " to run " +
             std::to_string(want) + ", given " + std::to_string(ran);
    });
  }
  if (way)
    ctx.expect(ways_ran == static_cast<uint64_t>(ops), [&] {
      return std::string(ferry::collective_name(c)) + " on rank " + std::to_string(g.rank()) +
             ": expected the transport's ways to run " + std::to_string(ops) + " ops, given " +
             std::to_string(ways_ran);
    });
}

// The algorithms a test can force for `c` on `g`: the transport's own ways only with native
// collectives, shm only for ranks on one host.
std::vector<Algorithm> forcible(Collective c, bool native, bool one_host) {
  std::vector<Algorithm> out;
  for (Algorithm a : ferry::algorithms_for(c)) {
    if (a == Algorithm::SharedMemory && !one_host) continue;
    if (!ferry::uses_native_collectives(a) || native) out.push_back(a);
  }
  return out;
}

std::string spec_of(Collective c, Algorithm a) {
  return std::string(ferry::collective_name(c)) + ":" + ferry::algorithm_name(a);
}

// The automatic choice for the forms run_forms issues: what the table answers for them
// (all_reduce's small payloads take one rule; the other collectives have one per transport,
// and reduce_scatter and all_gather one more for ranks on shared hosts).
Algorithm automatic_for(Collective c, const Group& g) {
  return ferry::choose_algorithm(c, 37 * sizeof(float), g.size(), g.impl().native() != nullptr,
                                 g.impl().placement());
}

// all_to_all's forms ask the table differently: equal blocks by their size, split lists, lists
// and layouts with 0 bytes (their sizes differ across ranks). Each form must run
// on the algorithm its question gets; the transport's own ways count as one (a way that does
// not fit a form falls to the next), and shm's fallback where the ranks cannot read each
// other's memory is the pairwise exchange.
void expect_all_to_all_automatic(Ctx& ctx, const Group& g) {
  ferry::detail::GroupImpl& impl = g.impl();
  const Collective c = Collective::AllToAll;
  auto check = [&](const char* form, size_t bytes, auto&& issue) {
    const Algorithm want = ferry::choose_algorithm(c, bytes, g.size(), impl.native() != nullptr,
                                                   impl.one_host());
    std::vector<uint64_t> before(ferry::kAlgorithmCount);
    for (size_t a = 0; a < ferry::kAlgorithmCount; ++a)
      before[a] = impl.runs(c, static_cast<Algorithm>(a));
    issue();
    uint64_t total = 0, as_asked = 0;
    for (size_t a = 0; a < ferry::kAlgorithmCount; ++a) {
      const auto algo = static_cast<Algorithm>(a);
      const uint64_t ran = impl.runs(c, algo) - before[a];
      total += ran;
      const bool same_way = ferry::uses_native_collectives(want)
                                ? ferry::uses_native_collectives(algo)
                                : algo == want || (want == Algorithm::SharedMemory &&
                                                   algo == Algorithm::Pairwise);
      if (same_way) as_asked += ran;
    }
    ctx.expect(total == 1 && as_asked == 1, [&] {
      return std::string("all_to_all ") + form + " on rank " + std::to_string(g.rank()) +
             ": expected " + ferry::algorithm_name(want) + " (or its fallback) to run it, " +
             std::to_string(as_asked) + " of " + std::to_string(total) + " op(s) did";
    });
  };
  auto form = [&](Starter start, uint64_t salt) {
    return [&ctx, &g, start, salt] {
      run_case(ctx, g, start, small_case(DType::Float32, 5, ReduceOp::Sum, 0, salt));
    };
  };
  check("with equal blocks", 37 * sizeof(float), form(start_all_to_all_single, 1));
  check("with split lists", 0, form(start_all_to_all_single_v, 2));
  check("of lists", 0, form(start_all_to_all, 3));
  check("with layouts", 0, [&] { layout_all_to_all(ctx, g); });
}

// The automatic choice for every form of `c` that run_forms issues.
void expect_automatic(Collective c, Ctx& ctx, const Group& g) {
  if (c == Collective::AllToAll) return expect_all_to_all_automatic(ctx, g);
  expect_dispatch(c, automatic_for(c, g), ctx, g);
}

// Under mpiexec or the UCX launcher: one process per rank, each with its own override. On a
// group of its own, so that the persistent requests other cases made on the world group (a
// group has at most 64) leave room for this case's.
void spmd_dispatch(Collective c, Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  expect_automatic(c, ctx, g);
  if (c == Collective::AllReduce) {
    // The automatic choice above the small sizes, which the transport takes as the table says.
    ferry::detail::GroupImpl& impl = g.impl();
    for (int64_t rows : {int64_t{4096}, int64_t{16384}}) {  // 16 KiB, 64 KiB
      const Algorithm want = ferry::choose_algorithm(c, static_cast<size_t>(rows) * 4, g.size(),
                                                     impl.native() != nullptr, impl.placement());
      const uint64_t before = impl.runs(c, want);
      run_case(ctx, g, start_all_reduce, small_case(DType::Float32, rows, ReduceOp::Sum, 0, 9));
      ctx.expect(impl.runs(c, want) == before + 1, [&] {
        return std::string("all_reduce of ") + std::to_string(rows * 4) + " B on rank " +
               std::to_string(g.rank()) + ": expected " + ferry::algorithm_name(want) +
               " to run";
      });
    }
  }
  for (Algorithm a : forcible(c, g.impl().native() != nullptr, g.impl().one_host())) {
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
      expect_automatic(c, ctx, g);
    });
    for (Algorithm a : forcible(c, false, false)) {
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

// The automatic choice per collective × bytes (as each op asks: per rank's input; all_gather
// its block; the forms with size lists ask with 0) × group size × transport. The rows without
// native collectives (local, UCX) are the table's rules as they were; the rows with them (MPI)
// are the ways MPI's collectives took before the table chose them, in the order they tried
// them: a persistent request up to 8 KiB staged each way, the exchange in groups of 2-4 ranks
// (broadcast: 2), else the non-blocking call. Both must stay as they are unless a measurement
// says otherwise.
TEST_CASE("algorithm table: the automatic choice per collective, size and transport",
          "[algorithms][dispatch]") {
  // The rows are for the defaults; a way switched off drops its rows (checked by the MPI
  // suites that run with it off).
  const bool defaults = ferry::config().mpi_persistent && ferry::config().mpi_exchange;
  ferry::set_algorithm_override("");
  using C = Collective;
  using A = Algorithm;
  struct Row {
    C c;
    size_t bytes;
    int world;
    A local;  // local and UCX
    A mpi;
  };
  const A P = A::Persistent, X = A::Exchange, N = A::Native;
  const Row rows[] = {
      {C::AllReduce, 8, 2, A::Direct, P},
      {C::AllReduce, 8, 8, A::Direct, P},
      {C::AllReduce, 8, 9, A::RecursiveDoubling, P},
      {C::AllReduce, 4096, 3, A::Direct, P},
      {C::AllReduce, 8192, 2, A::RecursiveDoubling, P},
      {C::AllReduce, 8193, 2, A::RecursiveDoubling, X},
      {C::AllReduce, 64 << 10, 1, A::RecursiveDoubling, N},
      {C::AllReduce, 64 << 10, 2, A::Ring, X},
      {C::AllReduce, 64 << 10, 4, A::Ring, X},
      {C::AllReduce, 64 << 10, 5, A::Ring, N},
      {C::AllReduce, 4 << 20, 3, A::Ring, X},
      {C::AllReduce, 4 << 20, 8, A::Ring, N},
      {C::Reduce, 8, 2, A::Tree, N},
      {C::Reduce, 4 << 20, 8, A::Tree, N},
      {C::ReduceScatter, 8, 2, A::Ring, P},
      {C::ReduceScatter, 64 << 10, 3, A::Ring, X},
      {C::ReduceScatter, 4 << 20, 8, A::Ring, N},
      {C::AllGather, 8, 8, A::Ring, P},
      {C::AllGather, 4096, 2, A::Ring, P},
      {C::AllGather, 4096, 3, A::Ring, X},
      {C::AllGather, 4096, 5, A::Ring, N},
      {C::AllGather, 64 << 10, 2, A::Ring, X},
      {C::AllGather, 4 << 20, 8, A::Ring, N},
      {C::AllToAll, 0, 3, A::Pairwise, P},  // split lists: no persistent form, the next takes it
      {C::AllToAll, 8, 2, A::Pairwise, P},
      {C::AllToAll, 64 << 10, 4, A::Pairwise, X},
      {C::AllToAll, 4 << 20, 8, A::Pairwise, N},
      {C::Broadcast, 8, 3, A::Tree, P},
      {C::Broadcast, 64 << 10, 2, A::Tree, X},
      {C::Broadcast, 64 << 10, 3, A::Tree, N},
      {C::Broadcast, 4 << 20, 8, A::Tree, N},
      {C::Gather, 0, 4, A::Linear, N},
      {C::Scatter, 0, 4, A::Linear, N},
      {C::Barrier, 0, 2, A::Dissemination, P},
      {C::Barrier, 0, 8, A::Dissemination, P},
  };
  for (const Row& r : rows) {
    INFO(ferry::collective_name(r.c) << ", " << r.bytes << " B, " << r.world << " ranks");
    CHECK(ferry::algorithm_name(ferry::choose_algorithm(r.c, r.bytes, r.world, false)) ==
          std::string(ferry::algorithm_name(r.local)));
    if (defaults)
      CHECK(ferry::algorithm_name(ferry::choose_algorithm(r.c, r.bytes, r.world, true)) ==
            std::string(ferry::algorithm_name(r.mpi)));
  }
}

// Ranks on one host: shared memory first where it was measured faster (algorithm_table.cpp),
// the rows above otherwise; on both kinds of transport alike.
TEST_CASE("algorithm table: the automatic choice for ranks on one host", "[algorithms][dispatch]") {
  ferry::set_algorithm_override("");
  using C = Collective;
  using A = Algorithm;
  struct Row {
    C c;
    size_t bytes;
    int world;
    A local;
    A mpi;
  };
  const A S = A::SharedMemory;
  const Row rows[] = {
      {C::AllReduce, 8, 2, S, S},
      {C::AllReduce, 16 << 10, 4, S, S},
      {C::AllReduce, (16 << 10) + 1, 2, S, S},
      {C::AllReduce, 4 << 20, 8, S, S},
      {C::Barrier, 0, 2, S, S},
      {C::Barrier, 0, 8, S, S},
      // all_to_all: shm at every size, split lists and layouts (asked as 0 B) included.
      {C::AllToAll, 0, 3, S, S},
      {C::AllToAll, 8, 2, S, S},
      {C::AllToAll, 8 << 10, 2, S, S},
      {C::AllToAll, (8 << 10) + 1, 2, S, S},
      {C::AllToAll, 4 << 20, 8, S, S},
      // all_gather (per rank's input): shm at every size, with or without MPI's collectives.
      {C::AllGather, 8, 2, S, S},
      {C::AllGather, 2 << 20, 2, S, S},
      {C::AllGather, (2 << 20) + 1, 2, S, S},
      {C::AllGather, (1 << 20) + 1, 4, S, S},
      {C::AllGather, 4 << 20, 8, S, S},
      // broadcast: with MPI's collectives, the persistent request up to 8 KiB, shm above.
      {C::Broadcast, 8, 2, S, A::Persistent},
      {C::Broadcast, 8 << 10, 3, S, A::Persistent},
      {C::Broadcast, (8 << 10) + 1, 3, S, S},
      {C::Broadcast, 64 << 10, 2, S, S},
      {C::Broadcast, 1 << 20, 8, S, S},
      {C::Broadcast, (1 << 20) + 1, 2, S, S},
      {C::Broadcast, 16 << 20, 3, S, S},
      // reduce_scatter (per rank's whole input): shm at every size, with or without MPI's
      // collectives.
      {C::ReduceScatter, 8, 2, S, S},
      {C::ReduceScatter, 1 << 20, 3, S, S},
      {C::ReduceScatter, (1 << 20) + 1, 2, S, S},
      {C::ReduceScatter, 16 << 20, 8, S, S},
      // reduce: without them the slots, the tree to 128 KiB, shm above.
      {C::Reduce, 8, 2, S, S},
      {C::Reduce, 16 << 10, 4, S, S},
      {C::Reduce, (16 << 10) + 1, 2, A::Tree, S},
      {C::Reduce, 128 << 10, 2, A::Tree, S},
      {C::Reduce, (128 << 10) + 1, 2, S, S},
      {C::Reduce, 16 << 20, 8, S, S},
  };
  const bool defaults = ferry::config().mpi_persistent && ferry::config().mpi_exchange;
  for (const Row& r : rows) {
    INFO(ferry::collective_name(r.c) << ", " << r.bytes << " B, " << r.world << " ranks");
    CHECK(ferry::algorithm_name(ferry::choose_algorithm(r.c, r.bytes, r.world, false, true)) ==
          std::string(ferry::algorithm_name(r.local)));
    if (defaults)
      CHECK(ferry::algorithm_name(ferry::choose_algorithm(r.c, r.bytes, r.world, true, true)) ==
            std::string(ferry::algorithm_name(r.mpi)));
  }
}

// An override of one of the transport's own ways is refused when the world group is made on a
// transport without collectives of its own: at init, before any op.
TEST_CASE("algorithm table: a transport's own way refused at init without one",
          "[algorithms][dispatch]") {
  for (const char* spec : {"all_reduce:native", "broadcast:persistent", "all_gather:exchange"}) {
    INFO(spec);
    ScopedAlgorithm o(spec);
    try {
      ferry::run_ranks(2, [](Group&) {});  // each rank makes its world group, and stops there
      FAIL("a local world accepted " << spec);
    } catch (const ferry::InvalidArgument& e) {
      const std::string msg = e.what();
      INFO(msg);
      CHECK(msg.find(spec) != std::string::npos);
      CHECK(msg.find("local") != std::string::npos);
      CHECK(msg.find("expected one of") != std::string::npos);
    }
  }
}
