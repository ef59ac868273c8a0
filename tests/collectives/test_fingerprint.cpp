// The collective fingerprint (collectives/engine/fingerprint.h): the mismatches of the table in
// docs/lifecycle.md (size, dtype, reduce op, root, op order, ...), each on a group of its own,
// with rank 1 the odd one.
//  - FERRY_CHECK=1 (checked mode): every row fails with MismatchError on every rank, naming the
//    odd rank and both calls, before any data moves. Local worlds of 2 and 3 here; the mpiexec
//    suites (MPI, and UCX with FERRY_BACKEND=ucx) run the same rows as spmd cases.
//  - default mode: the rows whose byte counts agree are caught through the tag (different calls'
//    messages never match) and diagnosed at the deadline as MismatchError on every rank that is
//    stuck; the rows whose byte counts differ fail at once as before. Not on MPI, whose native
//    collectives carry no tag (docs/lifecycle.md says so).
#include "spmd_case.h"
#include "test_helpers.h"

#include "tests/spmd/spmd.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace ftest {
namespace {

struct Row {
  const char* name;
  // Runs the row on `g`; `odd` on rank 1.
  std::function<void(Group& g, bool odd)> run;
  // Two pieces of the two calls' descriptions that every rank's message must hold.
  const char* mine;
  const char* theirs;
  // Through the tag or a byte count on local, and on UCX unless `eager_escapes`: UCX completes
  // small sends before anyone receives them, so a broadcast whose ranks disagree on the root
  // (every rank only sends, or receives from a rank that did send) finishes on every rank.
  bool default_mode_catches;
  bool eager_escapes = false;
};

std::vector<Row> rows() {
  using ferry::all_gather;
  using ferry::all_reduce;
  using ferry::broadcast;
  std::vector<Row> r;
  r.push_back({"size 4 vs 5 elements", [](Group& g, bool odd) {
                 Tensor t = ferry::ones({odd ? 5 : 4});
                 all_reduce(t, g).wait();
               }, "float32 [4]", "float32 [5]", true});
  r.push_back({"float32 vs int32", [](Group& g, bool odd) {
                 Tensor t = ferry::ones({4}, odd ? DType::Int32 : DType::Float32);
                 all_reduce(t, g).wait();
               }, "float32 [4]", "int32 [4]", true});
  r.push_back({"float32 vs float64", [](Group& g, bool odd) {
                 Tensor t = ferry::ones({4}, odd ? DType::Float64 : DType::Float32);
                 all_reduce(t, g).wait();
               }, "float32 [4]", "float64 [4]", true});
  r.push_back({"reduce op sum vs max", [](Group& g, bool odd) {
                 Tensor t = ferry::ones({4});
                 all_reduce(t, g, odd ? ReduceOp::Max : ReduceOp::Sum).wait();
               }, "(sum, float32 [4])", "(max, float32 [4])", true});
  r.push_back({"broadcast root 0 vs 1", [](Group& g, bool odd) {
                 Tensor t = ferry::ones({4});
                 broadcast(t, odd ? 1 : 0, g).wait();
               }, "root 0", "root 1", true, true});
  r.push_back({"op order all_reduce vs broadcast", [](Group& g, bool odd) {
                 Tensor a = ferry::ones({4}), b = ferry::ones({4});
                 if (odd) {
                   Work w1 = broadcast(b, 0, g);
                   Work w2 = all_reduce(a, g);
                   w1.wait();
                   w2.wait();
                 } else {
                   Work w1 = all_reduce(a, g);
                   Work w2 = broadcast(b, 0, g);
                   w1.wait();
                   w2.wait();
                 }
                 // Not caught reliably in the default mode: each rank has two ops queued, and
                 // when a rank's first op has timed out its second one may be the op that
                 // answers the peer's diagnosis (seq 1 against seq 0: "elsewhere", a
                 // TimeoutError); a CI run under load showed it. FERRY_CHECK=1 catches it.
               }, "all_reduce (sum, float32 [4])", "broadcast (float32 [4]) root 0", false});
  r.push_back({"a rank skips one collective", [](Group& g, bool odd) {
                 Tensor a = ferry::ones({4}), b = ferry::ones({4});
                 if (!odd) all_reduce(a, g).wait();
                 broadcast(b, 0, g).wait();
               }, "all_reduce (sum, float32 [4])", "broadcast (float32 [4]) root 0", true});
  r.push_back({"all_gather 2 vs 3 elements", [](Group& g, bool odd) {
                 const int64_t n = odd ? 3 : 2;
                 Tensor t = ferry::ones({n});
                 Tensor out = ferry::zeros({n * g.size()});
                 all_gather(t, out, g).wait();
               }, "float32 [2]", "float32 [3]", true});
  return r;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Every row on a fresh group split from `world`.
//  - checked: every rank fails with MismatchError naming the odd rank (rank 0 on rank 1) and
//    both calls.
//  - default: rank 0 and rank 1 fail (MismatchError, or PeerFailure when a peer gave up after
//    its own MismatchError; never a TimeoutError), one of them with MismatchError; a rank whose
//    own call could complete (rank 2 receiving root 0's broadcast) may return, but the group is
//    then failed for it too: its next collective fails instead of running out of step.
void table(Group& world, Ctx& ctx, bool checked) {
  for (const Row& row : rows()) {
    if (!checked && !row.default_mode_catches) continue;
    if (!checked && row.eager_escapes && world.transport().name() == "ucx") continue;
    Group g = world.split(0, world.rank());
    const bool odd = g.rank() == 1;
    const std::exception_ptr e = capture([&] { row.run(g, odd); });
    const std::string msg = what_of(e);
    const std::string kind = error_kind(e);
    const std::string w = where(g, std::string(row.name) + (checked ? " (checked)" : " (default)"));
    if (checked) {
      ctx.expect(kind == "MismatchError",
                 [&] { return w + ": expected MismatchError, got " + kind + ": " + msg; });
      if (kind != "MismatchError") continue;
      FT_CHECK(ctx, contains(msg, odd ? "rank 0 called" : "rank 1 called"), w + ": " + msg);
      FT_CHECK(ctx, contains(msg, row.mine) && contains(msg, row.theirs), w + ": " + msg);
      continue;
    }
    if (g.rank() <= 1) {
      ctx.expect(kind == "MismatchError" || kind == "PeerFailure",
                 [&] { return w + ": expected MismatchError, got " + kind + ": " + msg; });
    } else {
      ctx.expect(e == nullptr || kind == "MismatchError" || kind == "PeerFailure",
                 [&] { return w + ": expected MismatchError or success, got " + kind + ": " + msg; });
    }
    if (e == nullptr) {
      const std::exception_ptr next = capture([&] { ferry::barrier(g).wait(); });
      ctx.expect(next != nullptr, [&] { return w + ": the group must fail for this rank too"; });
    }
    // One of ranks 0 and 1 says MismatchError: seen on the main thread or by the final check.
    if (kind == "MismatchError" && contains(msg, "called different collectives"))
      FT_CHECK(ctx, contains(msg, row.mine) && contains(msg, row.theirs), w + ": " + msg);
  }
  // The world group is untouched by the failures of the groups split from it.
  Tensor t = ferry::ones({2});
  ferry::all_reduce(t, world).wait();
  FT_CHECK(ctx, to_doubles(t)[0] == world.size(), where(world, "world all_reduce afterwards"));
}

class ScopedCheckMode {
 public:
  explicit ScopedCheckMode(bool on) : previous_(ferry::check_mode()) { ferry::set_check_mode(on); }
  ~ScopedCheckMode() { ferry::set_check_mode(previous_); }

 private:
  bool previous_;
};

// The mpiexec runner: one process per rank, so each sets its own mode (all alike, between two
// barriers of the world group so that no op straddles the change).
void under_mode(Group& g, Ctx& ctx, bool checked, std::chrono::milliseconds timeout) {
  ferry::barrier(g).wait();
  const auto previous_timeout = ferry::default_timeout();
  const bool previous_check = ferry::check_mode();
  ferry::set_check_mode(checked);
  ferry::set_default_timeout(timeout);
  table(g, ctx, checked);
  ferry::barrier(g).wait();
  ferry::set_check_mode(previous_check);
  ferry::set_default_timeout(previous_timeout);
}

std::string unless_two_ranks(const Group& g) {
  return g.size() < 2 ? "a mismatch needs two ranks" : "";
}

[[maybe_unused]] const bool kCheckedRegistered = register_spmd_case(
    "fingerprint: FERRY_CHECK=1 turns every row of the mismatch table into MismatchError",
    "[fingerprint][checked]",
    [](Group& g, Ctx& ctx) { under_mode(g, ctx, true, std::chrono::milliseconds(30000)); },
    unless_two_ranks);

[[maybe_unused]] const bool kDefaultRegistered = register_spmd_case(
    "fingerprint: the default mode catches the rows carried by tagged messages",
    "[fingerprint][default]",
    [](Group& g, Ctx& ctx) { under_mode(g, ctx, false, std::chrono::milliseconds(2000)); },
    [](const Group& g) -> std::string {
      // MPI's native collectives carry no tag: only FERRY_CHECK=1 sees their mismatches, and a
      // native collective that times out cannot be withdrawn (the mismatch-mpi-* tests check
      // what MPI's default mode catches).
      if (g.transport().name() == "mpi")
        return "MPI's native collectives carry no tag to tell different calls apart";
      return unless_two_ranks(g);
    });

}  // namespace

TEST_CASE("fingerprint: FERRY_CHECK=1 turns every row of the mismatch table into MismatchError",
          "[fingerprint][checked]") {
  ScopedCheckMode checked(true);
  ScopedDefaultTimeout timeout(std::chrono::milliseconds(20000));
  const int world = GENERATE(2, 3, 5);
  run_checked(world, [](Group& g, Ctx& ctx) { table(g, ctx, true); });
}

TEST_CASE("fingerprint: the default mode catches the rows carried by tagged messages",
          "[fingerprint][default]") {
  ScopedCheckMode unchecked(false);
  ScopedDefaultTimeout timeout(std::chrono::milliseconds(1500));
  const int world = GENERATE(2, 3);
  run_checked(world, [](Group& g, Ctx& ctx) { table(g, ctx, false); });
}

TEST_CASE("fingerprint: matching calls pass under FERRY_CHECK=1 on every path",
          "[fingerprint][checked]") {
  ScopedCheckMode checked(true);
  ScopedDefaultTimeout timeout(std::chrono::milliseconds(20000));
  run_checked(3, [](Group& g, Ctx& ctx) {
    Tensor t = ferry::ones({4});
    ferry::all_reduce(t, g).wait();
    FT_CHECK(ctx, to_doubles(t)[3] == 3.0, where(g, "all_reduce"));
    Tensor b = ferry::full({3}, static_cast<double>(g.rank()));
    ferry::broadcast(b, 2, g).wait();
    FT_CHECK(ctx, to_doubles(b)[0] == 2.0, where(g, "broadcast"));
    // Rows that differ per rank where they may: all_gather_v with agreed sizes.
    const std::vector<int64_t> sizes{1, 2, 0};
    Tensor in = ferry::ones({sizes[static_cast<size_t>(g.rank())], 2});
    Tensor out = ferry::zeros({3, 2});
    ferry::all_gather_v(in, out, sizes, g).wait();
    FT_CHECK(ctx, to_doubles(out)[5] == 1.0, where(g, "all_gather_v"));
    ferry::barrier(g).wait();
    FT_CHECK(ctx, !g.poisoned(), where(g, "not poisoned"));
  });
}

}  // namespace ftest
