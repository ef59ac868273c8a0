// Several collectives in flight before any wait (mixed kinds, waited in reverse, with wait_all,
// by polling), and every point-to-point algorithm of algorithms_for(c) forced with
// set_algorithm_override.
#include "checks.h"
#include "spmd_case.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

using namespace ftest;

namespace {

OpCase make_case(DType dt, int64_t rows, int64_t inner, ReduceOp op, int root, int variant,
                 uint64_t salt) {
  OpCase c;
  c.dtype = dt;
  c.rows = rows;
  c.inner = inner;
  c.op = op;
  c.root = root;
  c.variant = variant;
  c.salt = salt;
  return c;
}

// One of every kind, issued back to back on `g`.
std::vector<Pending> start_mixed(Ctx& ctx, const Group& g, DType dt, int64_t rows, int64_t inner) {
  const int W = g.size();
  const ReduceOp red = dt == DType::UInt8 ? ReduceOp::Max : ReduceOp::Sum;
  std::vector<Pending> p;
  p.push_back(start_all_reduce(ctx, g, make_case(dt, rows, inner, red, 0, 0, 1)));
  p.push_back(start_broadcast(ctx, g, make_case(dt, rows, inner, red, W - 1, 0, 2)));
  p.push_back(start_all_gather(ctx, g, make_case(dt, rows, inner, red, 0, 0, 3)));
  p.push_back(start_reduce_scatter(ctx, g, make_case(dt, rows, inner, ReduceOp::Max, 0, 0, 4)));
  p.push_back(start_all_to_all_single(ctx, g, make_case(dt, rows, inner, red, 0, 0, 5)));
  p.push_back(start_ring_send_recv(ctx, g, make_case(dt, rows, inner, red, 0, 0, 6)));
  p.push_back(start_all_to_all_single_v(ctx, g, make_case(dt, rows, inner, red, 0, 0, 7)));
  p.push_back(start_all_gather_v_exchanged(ctx, g, make_case(dt, rows, inner, red, 0, 0, 8)));
  p.push_back(start_reduce(ctx, g, make_case(dt, rows, inner, ReduceOp::Min, 0, 1, 9)));
  p.push_back(start_barrier(ctx, g, make_case(dt, rows, inner, red, 0, 0, 10)));
  p.push_back(start_gather(ctx, g, make_case(dt, rows, inner, red, W / 2, 0, 11)));
  p.push_back(start_scatter(ctx, g, make_case(dt, rows, inner, red, W - 1, 0, 12)));
  p.push_back(start_all_to_all(ctx, g, make_case(dt, rows, inner, red, 0, 0, 13)));
  p.push_back(start_reduce_scatter_v(ctx, g, make_case(dt, rows, inner, red, 0, 0, 14)));
  p.push_back(start_all_gather_v(ctx, g, make_case(dt, rows, inner, red, 0, 0, 15)));
  return p;
}

}  // namespace

FT_SPMD_CASE("outstanding: mixed collectives; waited in reverse order", "[outstanding]", 1, 2, 3, 4, 7, 8) {
  for (DType dt : ferry::kAllDTypes) {
    std::vector<Pending> p = start_mixed(ctx, g, dt, 37, 0);
    for (auto it = p.rbegin(); it != p.rend(); ++it) finish(ctx, *it);
  }
}

FT_SPMD_CASE("outstanding: mixed collectives; wait_all and polling", "[outstanding]", 2, 3, 4, 8) {
  {  // wait_all over every Work of every op
    std::vector<Pending> p = start_mixed(ctx, g, DType::Float32, 5, 3);
    std::vector<Work> all;
    for (Pending& x : p) all.insert(all.end(), x.works.begin(), x.works.end());
    ferry::wait_all(all);
    for (Pending& x : p) {
      for (Work& w : x.works) FT_CHECK(ctx, w.is_completed(), x.where + ": completed after wait_all");
      x.verify();
    }
  }
  {  // poll is_completed until every op finished (bounded), then wait and verify
    std::vector<Pending> p = start_mixed(ctx, g, DType::Int64, 1, 0);
    const auto t0 = std::chrono::steady_clock::now();
    auto all_done = [&] {
      for (Pending& x : p)
        for (Work& w : x.works)
          if (!w.is_completed()) return false;
      return true;
    };
    while (!all_done() && seconds_since(t0) < 30) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    FT_CHECK(ctx, all_done(), where(g, "every op completes without anyone waiting"));
    for (Pending& x : p) finish(ctx, x);
  }
}

FT_SPMD_CASE("outstanding: many all_reduces of different sizes; then wait_all", "[outstanding]", 1, 3, 4, 8) {
  std::vector<Pending> p;
  for (uint64_t i = 0; i < 24; ++i)
    p.push_back(start_all_reduce(
        ctx, g, make_case(i % 3 == 0 ? DType::BFloat16 : DType::Float32, static_cast<int64_t>(i * i * 7),
                          0, i % 4 == 0 ? ReduceOp::Max : ReduceOp::Sum, 0, static_cast<int>(i % 3), i)));
  std::vector<Work> all;
  for (Pending& x : p) all.push_back(x.works[0]);
  ferry::wait_all(all);
  for (Pending& x : p) x.verify();
}

// The MPI transport carries small collectives as persistent requests, one per (op, size) and
// one op at a time (backends/mpi/mpi_persistent.h): the same small op issued many times before
// any wait must still give each op its own result, and more sizes than it keeps requests for
// must take the ordinary path.
FT_SPMD_CASE("outstanding: the same small op many times; more sizes than kept requests", "[outstanding]", 1, 2, 3, 4) {
  const int W = g.size();
  std::vector<Pending> p;
  for (uint64_t i = 0; i < 6; ++i) {
    p.push_back(start_all_reduce(ctx, g, make_case(DType::Float32, 2, 0, ReduceOp::Sum, 0, 0, 100 + i)));
    p.push_back(start_all_gather(ctx, g, make_case(DType::Int32, 3, 0, ReduceOp::Sum, 0, static_cast<int>(i % 2), 200 + i)));
    p.push_back(start_broadcast(ctx, g, make_case(DType::Float64, 4, 0, ReduceOp::Sum, W - 1, 0, 300 + i)));
    p.push_back(start_reduce_scatter(ctx, g, make_case(DType::Float32, 2, 0, ReduceOp::Max, 0, 0, 400 + i)));
    p.push_back(start_all_to_all_single(ctx, g, make_case(DType::UInt8, 5, 0, ReduceOp::Sum, 0, 0, 500 + i)));
    p.push_back(start_barrier(ctx, g, make_case(DType::Float32, 1, 0, ReduceOp::Sum, 0, 0, 600 + i)));
  }
  for (auto it = p.rbegin(); it != p.rend(); ++it) finish(ctx, *it);
  p.clear();
  for (uint64_t n = 1; n <= 80; ++n)
    p.push_back(start_all_reduce(ctx, g, make_case(DType::Int32, static_cast<int64_t>(n), 0, ReduceOp::Sum, 0, 0, n)));
  for (Pending& x : p) finish(ctx, x);
}

// Above 8 KiB (all_gather, all_to_all and the v-forms at every size), the MPI transport carries
// these ops in groups of 2-4 ranks as one round of point-to-point messages each, with a tag per
// op (backends/mpi/mpi_exchange.h). Ranks here wait in different orders (rank 0 last op first,
// the others first op first). Counts are odd, so that blocks are uneven; bfloat16 reaches MPI
// widened to float32.
FT_SPMD_CASE("outstanding: mid-size ops issued together; ranks wait in different orders", "[outstanding]", 2, 3, 4) {
  const int W = g.size();
  for (DType dt : {DType::Float32, DType::Float64, DType::Int32, DType::UInt8, DType::BFloat16}) {
    const ReduceOp red = dt == DType::UInt8 ? ReduceOp::Max : ReduceOp::Sum;
    const int64_t rows = 2053, inner = dt == DType::UInt8 ? 7 : 1;
    std::vector<Pending> p;
    for (uint64_t i = 0; i < 3; ++i) {
      const int variant = static_cast<int>(i % 2);
      p.push_back(start_all_reduce(ctx, g, make_case(dt, rows + static_cast<int64_t>(i), inner, red, 0, static_cast<int>(i), 10 + i)));
      p.push_back(start_reduce_scatter(ctx, g, make_case(dt, rows, inner, ReduceOp::Max, 0, variant, 20 + i)));
      p.push_back(start_all_gather(ctx, g, make_case(dt, rows, inner, red, 0, variant, 30 + i)));
      p.push_back(start_all_to_all_single(ctx, g, make_case(dt, rows, inner, red, 0, 0, 40 + i)));
      p.push_back(start_broadcast(ctx, g, make_case(dt, rows, inner, red, static_cast<int>(i) % W, 0, 50 + i)));
      p.push_back(start_reduce_scatter_v(ctx, g, make_case(dt, rows / 3, inner, red, 0, 0, 60 + i)));
      p.push_back(start_all_gather_v(ctx, g, make_case(dt, rows / 3, inner, red, 0, 0, 70 + i)));
      p.push_back(start_all_to_all_single_v(ctx, g, make_case(dt, rows / 3, inner, red, 0, 0, 80 + i)));
      p.push_back(start_all_to_all(ctx, g, make_case(dt, rows, inner, red, 0, 0, 90 + i)));
    }
    if (g.rank() == 0)
      for (auto it = p.rbegin(); it != p.rend(); ++it) finish(ctx, *it);
    else
      for (Pending& x : p) finish(ctx, x);
  }
}

FT_SPMD_CASE("outstanding: a large op and small ones behind it", "[outstanding][large]", 2, 3) {
  std::vector<Pending> p;
  p.push_back(start_all_reduce(ctx, g, make_case(DType::Float32, kLarge, 0, ReduceOp::Sum, 0, 1, 1)));
  p.push_back(start_all_reduce(ctx, g, make_case(DType::Float32, 37, 0, ReduceOp::Sum, 0, 0, 2)));
  p.push_back(start_all_gather(ctx, g, make_case(DType::Int32, 1, 0, ReduceOp::Sum, 0, 0, 3)));
  p.push_back(start_all_to_all_single(ctx, g, make_case(DType::Float64, kLarge / 8, 0, ReduceOp::Sum, 0, 0, 4)));
  finish(ctx, p[1]);  // the small ones first
  finish(ctx, p[2]);
  finish(ctx, p[0]);
  finish(ctx, p[3]);
}

// ---------------------------------------------------------------------------------------------
// Algorithm overrides.

namespace {

const ferry::Collective kCollectives[] = {
    ferry::Collective::AllReduce, ferry::Collective::Reduce,    ferry::Collective::ReduceScatter,
    ferry::Collective::AllGather, ferry::Collective::AllToAll,  ferry::Collective::Broadcast,
    ferry::Collective::Gather,    ferry::Collective::Scatter,   ferry::Collective::Barrier};

// Every raw op that the collective's algorithm carries, for one dtype and shape.
void run_ops_of(ferry::Collective coll, Ctx& ctx, const Group& g, DType dt, int64_t rows, int64_t inner) {
  const int W = g.size();
  auto c = [&](ReduceOp op, int root, int variant, uint64_t salt) {
    return make_case(dt, rows, inner, op, root, variant, salt);
  };
  const bool fl = dt == DType::Float32 || dt == DType::Float16;
  switch (coll) {
    case ferry::Collective::AllReduce:
      run_case(ctx, g, start_all_reduce, c(ReduceOp::Sum, 0, 0, 1));
      run_case(ctx, g, start_all_reduce, c(ReduceOp::Max, 0, 1, 2));
      run_case(ctx, g, start_all_reduce, c(fl ? ReduceOp::Avg : ReduceOp::Prod, 0, 2, 3));
      break;
    case ferry::Collective::Reduce:
      run_case(ctx, g, start_reduce, c(ReduceOp::Sum, 0, 0, 1));
      run_case(ctx, g, start_reduce, c(ReduceOp::Min, W - 1, 1, 2));
      break;
    case ferry::Collective::ReduceScatter:
      run_case(ctx, g, start_reduce_scatter, c(ReduceOp::Sum, 0, 0, 1));
      run_case(ctx, g, start_reduce_scatter, c(ReduceOp::Max, 0, 1, 2));
      run_case(ctx, g, start_reduce_scatter_v, c(ReduceOp::Sum, 0, 0, 3));
      break;
    case ferry::Collective::AllGather:
      run_case(ctx, g, start_all_gather, c(ReduceOp::Sum, 0, 0, 1));
      run_case(ctx, g, start_all_gather, c(ReduceOp::Sum, 0, 1, 2));
      run_case(ctx, g, start_all_gather_v, c(ReduceOp::Sum, 0, 0, 3));
      run_case(ctx, g, start_all_gather_v_exchanged, c(ReduceOp::Sum, 0, 0, 4));
      break;
    case ferry::Collective::AllToAll:
      run_case(ctx, g, start_all_to_all_single, c(ReduceOp::Sum, 0, 0, 1));
      run_case(ctx, g, start_all_to_all_single_v, c(ReduceOp::Sum, 0, 0, 2));
      run_case(ctx, g, start_all_to_all, c(ReduceOp::Sum, 0, 0, 3));
      break;
    case ferry::Collective::Broadcast:
      run_case(ctx, g, start_broadcast, c(ReduceOp::Sum, 0, 0, 1));
      run_case(ctx, g, start_broadcast, c(ReduceOp::Sum, W - 1, 0, 2));
      break;
    case ferry::Collective::Gather:
      run_case(ctx, g, start_gather, c(ReduceOp::Sum, 0, 0, 1));
      run_case(ctx, g, start_gather, c(ReduceOp::Sum, W - 1, 0, 2));
      break;
    case ferry::Collective::Scatter:
      run_case(ctx, g, start_scatter, c(ReduceOp::Sum, 0, 0, 1));
      run_case(ctx, g, start_scatter, c(ReduceOp::Sum, W - 1, 0, 2));
      break;
    case ferry::Collective::Barrier:
      run_case(ctx, g, start_barrier, c(ReduceOp::Sum, 0, 1, 1));
      run_case(ctx, g, start_barrier, c(ReduceOp::Sum, 0, 0, 2));
      break;
  }
}

}  // namespace

// The point-to-point algorithms of `c` (all but the transport's own ways, which the local
// transport lacks, and shm, which needs ranks that are processes of one host).
std::vector<ferry::Algorithm> point_to_point_algorithms(ferry::Collective c) {
  std::vector<ferry::Algorithm> p2p;
  for (ferry::Algorithm a : ferry::algorithms_for(c))
    if (!ferry::uses_native_collectives(a) && a != ferry::Algorithm::SharedMemory)
      p2p.push_back(a);
  return p2p;
}

TEST_CASE("algorithm overrides: every algorithm of every collective", "[outstanding][algorithms]") {
  const ferry::Collective coll = GENERATE(from_range(std::begin(kCollectives), std::end(kCollectives)));
  const std::vector<ferry::Algorithm> algos = point_to_point_algorithms(coll);
  REQUIRE_FALSE(algos.empty());
  const ferry::Algorithm algo = GENERATE_COPY(from_range(algos));
  const int world = GENERATE(1, 2, 3, 4, 7, 8);
  const std::string spec =
      std::string(ferry::collective_name(coll)) + ":" + ferry::algorithm_name(algo);
  INFO("override " << spec << ", world size " << world);
  ScopedAlgorithm override_algo(spec);  // restored with set_algorithm_override("") at scope exit
  CHECK(ferry::choose_algorithm(coll, 4096, world, false) == algo);
  CHECK(ferry::choose_algorithm(coll, 64u << 20, world, false) == algo);
  CHECK(ferry::choose_algorithm(coll, 64u << 20, world, true) == algo);  // over MPI's messages
  run_checked(world, [coll](Group& g, Ctx& ctx) {
    // [0], [1], [37], [5, 3] for all these dtypes; a larger odd count on small worlds.
    for (DType dt : {DType::Float32, DType::Float16, DType::Int32, DType::UInt8})
      for (auto [rows, inner] : {std::pair<int64_t, int64_t>{0, 0}, {1, 0}, {37, 0}, {5, 3}})
        run_ops_of(coll, ctx, g, dt, rows, inner);
    if (g.size() <= 4) run_ops_of(coll, ctx, g, DType::Float32, 65537, 0);
  });
}

TEST_CASE("algorithm overrides: restore; table and bad specs", "[outstanding][algorithms]") {
  for (ferry::Collective coll : kCollectives) {
    const std::string name = ferry::collective_name(coll);
    INFO(name);
    const std::vector<ferry::Algorithm>& algos = ferry::algorithms_for(coll);
    REQUIRE(algos.size() >= 2);
    CHECK(algos.front() == ferry::Algorithm::Native);
    const ferry::Algorithm automatic = ferry::choose_algorithm(coll, 1 << 20, 4, false);
    CHECK(std::find(algos.begin() + 1, algos.end(), automatic) != algos.end());
    CHECK_FALSE(ferry::uses_native_collectives(automatic));
    CHECK(ferry::uses_native_collectives(ferry::choose_algorithm(coll, 1 << 20, 4, true)));
    {
      const ferry::Algorithm last = point_to_point_algorithms(coll).back();
      ScopedAlgorithm o(name + ":" + ferry::algorithm_name(last));
      CHECK(ferry::choose_algorithm(coll, 1 << 20, 4, false) == last);
      CHECK(ferry::choose_algorithm(coll, 1 << 20, 4, true) == last);
      CHECK(ferry::algorithm_table().find(name) != std::string::npos);
    }
    // shm where the collective has it: chosen for ranks on one host, refused elsewhere.
    if (algos.back() == ferry::Algorithm::SharedMemory) {
      ScopedAlgorithm o(name + ":shm");
      CHECK(ferry::choose_algorithm(coll, 1 << 20, 4, true, true) ==
            ferry::Algorithm::SharedMemory);
      CHECK_THROWS_AS(ferry::choose_algorithm(coll, 1 << 20, 4, false),
                      ferry::InvalidArgument);
    }
    // The transport's own ways where the transport has no collectives of its own: refused
    // (at init by the world group, and at issue for an override set later), naming the
    // collective and the choices it has there.
    for (ferry::Algorithm way : algos) {
      if (!ferry::uses_native_collectives(way)) continue;
      const std::string spec = name + ":" + ferry::algorithm_name(way);
      INFO(spec);
      ScopedAlgorithm o(spec);
      CHECK(ferry::choose_algorithm(coll, 1 << 20, 4, true) == way);
      for (int refusal = 0; refusal < 2; ++refusal) {
        try {
          if (refusal == 0)
            ferry::choose_algorithm(coll, 1 << 20, 4, false);
          else
            ferry::detail::check_algorithm_overrides(false, "local");
          FAIL("a way of the transport's own accepted without native collectives");
        } catch (const ferry::InvalidArgument& e) {
          const std::string msg = e.what();
          INFO(msg);
          CHECK(msg.find(spec) != std::string::npos);
          CHECK(msg.find(ferry::algorithm_name(algos.back())) != std::string::npos);
          CHECK(msg.find(ferry::algorithm_name(way)) != std::string::npos);
        }
      }
      CHECK_NOTHROW(ferry::detail::check_algorithm_overrides(true, "mpi"));
    }
    // "" restored the automatic rule.
    CHECK(ferry::choose_algorithm(coll, 1 << 20, 4, false) == automatic);
    for (ferry::Algorithm a : algos)
      CHECK(ferry::algorithm_table().find(ferry::algorithm_name(a)) != std::string::npos);
  }
  {  // several overrides in one spec, FERRY_ALGO syntax
    const auto ar = point_to_point_algorithms(ferry::Collective::AllReduce);
    const auto bc = point_to_point_algorithms(ferry::Collective::Broadcast);
    ScopedAlgorithm o(std::string("all_reduce:") + ferry::algorithm_name(ar.front()) +
                      ",broadcast:" + ferry::algorithm_name(bc.back()));
    CHECK(ferry::choose_algorithm(ferry::Collective::AllReduce, 123, 3, false) == ar.front());
    CHECK(ferry::choose_algorithm(ferry::Collective::Broadcast, 123, 3, false) == bc.back());
  }
  CHECK_THROWS_AS(ferry::set_algorithm_override("no_such_collective:ring"), ferry::InvalidArgument);
  CHECK_THROWS_AS(ferry::set_algorithm_override("all_reduce:no_such_algorithm"), ferry::InvalidArgument);
  // An algorithm of another collective: the message names the collective, what was given and
  // the choices it has.
  try {
    ferry::set_algorithm_override("broadcast:ring");
    FAIL("broadcast:ring was accepted");
  } catch (const ferry::InvalidArgument& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("broadcast has no algorithm 'ring'; expected one of native, persistent, "
                   "exchange, tree") != std::string::npos);
  }
  CHECK_THROWS_AS(ferry::set_algorithm_override("all_reduce"), ferry::InvalidArgument);
  ferry::set_algorithm_override("");
}

FT_SPMD_CASE("outstanding: a Work dropped before it completed still completes its op", "[outstanding]",
             1, 2, 3) {
  // Under MPI an op may have started at issue, with MPI owning its buffers: dropping the Work
  // must neither free them early nor leave the op unfinished for the peers.
  Tensor a = ferry::full({1000}, g.rank() + 1.0);
  {
    Work dropped = ferry::all_reduce(a, g);
  }
  Tensor b = ferry::full({4}, 1.0);
  ferry::all_reduce(b, g).wait();
  ferry::barrier(g).wait();
  const double expected = g.size() * (g.size() + 1) / 2.0;
  FT_CHECK(ctx, a.get_flat(999) == expected, "the dropped all_reduce's result");
  FT_CHECK(ctx, b.get_flat(0) == g.size(), "the all_reduce after it");
}

// Background progress with nobody waiting: each op's callback runs once it completed, whoever
// moves it (a queued op: the group's worker; an MPI collective started at issue: handed to the
// group's worker too, InFlightWork::progress), and an op issued after one that was
// handed off still completes, in order, with the right values.
FT_SPMD_CASE("outstanding: ops handed to background progress complete while nobody waits", "[outstanding]", 1, 2, 3, 4) {
  const int W = g.size();
  constexpr int kOps = 4;
  std::atomic<int> completed{0};
  std::vector<Tensor> sums;
  std::vector<ferry::Work> works;
  for (int i = 0; i < kOps; ++i) {
    sums.push_back(ferry::full({3 + i}, static_cast<double>(g.rank() + i), DType::Float64));
    works.push_back(ferry::all_reduce(sums.back(), g));
    works.back().progress_in_background([&] { completed.fetch_add(1); });
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (completed.load() < kOps && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  FT_CHECK(ctx, completed.load() == kOps,
           where(g, std::to_string(completed.load()) + " of " + std::to_string(kOps) +
                        " callbacks ran within 20 s without a wait"));
  for (int i = 0; i < kOps; ++i) {
    works[i].wait();
    const double want = W * (W - 1) / 2.0 + W * i;
    ctx.expect_tensor(where(g, "op " + std::to_string(i)), sums[i], DType::Float64, {3 + i},
                      std::vector<double>(3 + i, want));
  }
}

// Ops started at issue on one rank and queued behind an earlier op on the others, then waited
// for latest first. The bfloat16 all_reduce is queued on every rank's group worker (it is
// widened first). Rank 0 waits for it before issuing two small ops of sizes the fresh group has
// not seen, so its worker is idle and they start at issue; the other ranks issue them at once,
// so they queue behind it and run one after another, each to its end. Under MPI each new size is
// a persistent request whose first start waits for the ranks' key check: rank 0 must start the
// all_reduce while it waits for the broadcast, whose key check the others reach only once the
// all_reduce finished.
FT_SPMD_CASE("outstanding: new small ops started at issue on one rank, queued on the others; latest waited first",
             "[outstanding][groups]", 2, 3, 4) {
  const Group sub = g.split(0, g.rank());
  FT_CHECK(ctx, sub.valid(), where(g, "split into one group"));
  if (!sub.valid()) return;
  const int W = sub.size();
  Pending queued = start_all_reduce(ctx, sub, make_case(DType::BFloat16, 37, 0, ReduceOp::Sum, 0, 0, 1));
  if (sub.rank() == 0) {
    finish(ctx, queued);
    // The worker marks itself idle just after the Work completed.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Pending reduced = start_all_reduce(ctx, sub, make_case(DType::Float32, 611, 0, ReduceOp::Sum, 0, 0, 2));
  Pending sent = start_broadcast(ctx, sub, make_case(DType::UInt8, 613, 0, ReduceOp::Sum, W - 1, 0, 3));
  finish(ctx, sent);
  finish(ctx, reduced);
  if (sub.rank() != 0) finish(ctx, queued);
}
