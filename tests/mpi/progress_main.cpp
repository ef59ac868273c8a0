// Collectives in flight finish while a rank is busy elsewhere in MPI, as MPI's own non-blocking
// collectives do: the point-to-point path of backends/mpi/mpi_exchange.h posts all of an op's
// messages when it is issued, so nothing waits for ferry to be called again on another rank.
//
//  1. Rank 0 issues one op of each kind that takes that path (and an MPI_Ibcast on 3 ranks),
//     then blocks in the user's own MPI_Barrier on MPI_COMM_WORLD before it waits for them;
//     the other ranks wait for theirs first and only then join the barrier.
//  2. Rank 0 waits for a ferry recv that rank 1 sends only after its all_reduce completed.
//  3. Every rank issues an all_reduce and calls ferry::finalize() without waiting for it, then
//     drops the Work: nothing may call MPI after MPI_Finalize (MPICH aborts the job).
//  4. (Run before 3, which ends MPI.) Every rank issues the ops with a Work::then callback each
//     and waits for none: every callback runs (the ranks fill this machine's cores, so nobody
//     drives the ops but the progress thread, which looks at them late).
// Every wait has FERRY_TIMEOUT = 10 s here, so a regression fails instead of hanging.
//
// Run as its own mpiexec job (mpiexec -n 2|3 test_progress_mpi); exit status 0 when every check
// passed on every rank.
#include <ferry/ferry.h>
#include "job_checks.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace ferry;
using ftest_mpi::Checks;
using ftest_mpi::every_rank_passed;

// Element i of rank r's input.
double value(int r, int64_t i) { return static_cast<double>((r + 1) * 1000 + i % 97); }

Tensor input_of(int r, int64_t n) {
  Tensor t = zeros({n});
  for (int64_t i = 0; i < n; ++i) t.set_flat(i, value(r, i));
  return t;
}

struct InFlight {
  std::string name;
  Work work;
  Tensor result;
  std::vector<double> expected;
};

// all_reduce (16 KiB and 64 KiB), reduce_scatter, all_gather, all_to_all_single, broadcast.
std::vector<InFlight> issue_all(const Group& g) {
  const int W = g.size(), me = g.rank();
  std::vector<InFlight> ops;
  for (int64_t n : {int64_t{4096}, int64_t{16384}}) {
    Tensor t = input_of(me, n);
    std::vector<double> sum(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      for (int r = 0; r < W; ++r) sum[static_cast<size_t>(i)] += value(r, i);
    ops.push_back({"all_reduce of " + std::to_string(n), all_reduce(t, g), t, sum});
  }
  {
    const int64_t block = 3000;
    Tensor in = input_of(me, block * W), out = zeros({block});
    std::vector<double> sum(static_cast<size_t>(block));
    for (int64_t i = 0; i < block; ++i)
      for (int r = 0; r < W; ++r) sum[static_cast<size_t>(i)] += value(r, me * block + i);
    ops.push_back({"reduce_scatter", reduce_scatter(in, out, g), out, sum});
  }
  {
    const int64_t block = 5000;
    Tensor in = input_of(me, block), out = zeros({block * W});
    std::vector<double> all;
    for (int r = 0; r < W; ++r)
      for (int64_t i = 0; i < block; ++i) all.push_back(value(r, i));
    ops.push_back({"all_gather", all_gather(in, out, g), out, all});
  }
  {
    const int64_t block = 5000;
    Tensor in = input_of(me, block * W), out = zeros({block * W});
    std::vector<double> got;
    for (int r = 0; r < W; ++r)
      for (int64_t i = 0; i < block; ++i) got.push_back(value(r, me * block + i));
    ops.push_back({"all_to_all_single", all_to_all_single(in, out, g), out, got});
  }
  {
    const int64_t n = 20000;
    const int root = W - 1;
    Tensor t = me == root ? input_of(root, n) : zeros({n});
    std::vector<double> want;
    for (int64_t i = 0; i < n; ++i) want.push_back(value(root, i));
    ops.push_back({"broadcast", broadcast(t, root, g), t, want});
  }
  return ops;
}

void wait_and_check(Checks& c, std::vector<InFlight>& ops, const std::string& scenario, int me) {
  for (InFlight& op : ops) {
    const std::string where = scenario + ", rank " + std::to_string(me) + ", " + op.name + ": ";
    try {
      op.work.wait();
    } catch (const std::exception& e) {
      c.expect(false, where + e.what());
      continue;
    }
    bool same = op.result.numel() == static_cast<int64_t>(op.expected.size());
    for (int64_t i = 0; same && i < op.result.numel(); ++i)
      same = op.result.get_flat(i) == op.expected[static_cast<size_t>(i)];
    c.expect(same, where + "wrong result");
  }
}

}  // namespace

int main() {
  set_default_timeout(std::chrono::milliseconds(10'000));
  Group world = init();
  const int me = world.rank();
  Checks c;

  {  // 1. The user's own blocking MPI call while ops are in flight.
    const std::string scenario = "rank 0 in MPI_Barrier before waiting";
    Group g = world.split(0, me);
    std::vector<InFlight> ops = issue_all(g);
    if (me == 0) {
      MPI_Barrier(MPI_COMM_WORLD);
      wait_and_check(c, ops, scenario, me);
    } else {
      wait_and_check(c, ops, scenario, me);
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
  {  // 2. Waiting for a point-to-point message that a peer sends only after its collective.
    const std::string scenario = "rank 0 waits a recv first";
    Group g = world.split(0, me);
    std::vector<InFlight> ops = issue_all(g);
    if (me == 0) {
      Tensor token = zeros({1});
      try {
        recv(token, 1, g, 5).wait();
        c.expect(token.get_flat(0) == 42.0, scenario + ": the token arrived");
      } catch (const std::exception& e) {
        c.expect(false, scenario + ", rank 0, recv: " + e.what());
      }
      wait_and_check(c, ops, scenario, me);
    } else {
      wait_and_check(c, ops, scenario, me);
      if (me == 1) send(full({1}, 42.0), 0, g, 5).wait();
    }
  }

  {  // 4. A Work::then callback runs though nobody waits for the op: with the ranks filling
     // the cores the op is left to its waiter, and the progress thread still moves it later.
    Group g = world.split(0, me);
    std::vector<InFlight> ops = issue_all(g);
    std::atomic<int> ran{0};
    for (InFlight& op : ops) op.work.then([&ran](Work) { ran.fetch_add(1); });
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (ran.load() < static_cast<int>(ops.size()) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    c.expect(ran.load() == static_cast<int>(ops.size()),
             "rank " + std::to_string(me) + ": " + std::to_string(ran.load()) + " of " +
                 std::to_string(ops.size()) + " then-callbacks ran without a wait");
    wait_and_check(c, ops, "then-callbacks without a wait", me);
  }

  const bool ok = every_rank_passed(c, world, "progress");

  {  // 3. An op still in flight at finalize(), its Work dropped afterwards.
    Group g = world.split(0, me);
    Tensor t = ones({16384});
    Work late = all_reduce(t, g);
    finalize();
  }  // `late` and `g` end here, after MPI_Finalize
  return ok ? 0 : 1;
}
