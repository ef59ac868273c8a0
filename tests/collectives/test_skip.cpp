// A rank that skips a collective. Its next call is combined with the others' skipped one; when
// the two are alike no op can tell (the skipping rank's count is one behind, consistently), so:
//  - FERRY_CHECK=1: the first later call that differs fails with MismatchError on every rank,
//    naming both calls and their sequence numbers (here rank 1's barrier at seq 1 against the
//    others' second all_reduce at seq 1). Local worlds here; the mpiexec and UCX suites run the
//    same body as a spmd case.
//  - when nothing later differs, the counts differ at the end: run_ranks (here) and finalize
//    (tests/mpi/timeout_main.cpp) compare how many collectives each rank issued.
#include "spmd_case.h"
#include "test_helpers.h"

#include <ferry/backends/world_handshake.h>

#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <string>

namespace ftest {
namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

class ScopedCheckMode {
 public:
  explicit ScopedCheckMode(bool on) : previous_(ferry::check_mode()) { ferry::set_check_mode(on); }
  ~ScopedCheckMode() { ferry::set_check_mode(previous_); }

 private:
  bool previous_;
};

// On a group of its own (the mismatch poisons it): rank 1 skips the first of two identical
// all_reduces, then every rank calls barrier. Expects MismatchError on every rank naming both
// calls with their sequence numbers.
void skip_then_differ(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  const uint64_t base = g.sequence_number();
  const bool odd = g.rank() == 1;
  Tensor t = ferry::full({4}, static_cast<double>(g.rank() + 1));
  const auto t0 = std::chrono::steady_clock::now();
  const std::exception_ptr e = capture([&] {
    if (!odd) ferry::all_reduce(t, g).wait();
    ferry::all_reduce(t, g).wait();
    ferry::barrier(g).wait();
  });
  const std::string msg = what_of(e), kind = error_kind(e);
  const std::string w = where(g, "rank 1 skips the first of two all_reduces (checked)");
  const std::string seq = "(seq " + std::to_string(base + 1) + ")";
  ctx.expect(kind == "MismatchError",
             [&] { return w + ": expected MismatchError, got " + kind + ": " + msg; });
  FT_CHECK(ctx, seconds_since(t0) < 10.0, w + ": took " + std::to_string(seconds_since(t0)) + " s");
  if (kind != "MismatchError") return;
  // The ranks that issued the second all_reduce name it and rank 1's barrier; rank 1 names its
  // barrier and rank 0's all_reduce: both calls, each with its sequence number.
  FT_CHECK(ctx, contains(msg, "called all_reduce (sum, float32 [4]) " + seq), w + ": " + msg);
  FT_CHECK(ctx, contains(msg, "called barrier " + seq), w + ": " + msg);
  FT_CHECK(ctx, contains(msg, odd ? "rank 0 called" : "rank 1 called"), w + ": " + msg);
}

[[maybe_unused]] const bool kSkipRegistered = register_spmd_case(
    "skip: FERRY_CHECK=1 fails the skipping rank's next differing call on every rank",
    "[skip][checked]", [](Group& g, Ctx& ctx) {
      // One process per rank: each sets its own mode, between two barriers of the world group
      // so that no op straddles the change.
      ferry::barrier(g).wait();
      const bool previous = ferry::check_mode();
      ferry::set_check_mode(true);
      skip_then_differ(g, ctx);
      ferry::barrier(g).wait();
      ferry::set_check_mode(previous);
    },
    [](const Group& g) { return g.size() < 2 ? std::string("one rank has no peer to skip") : ""; });

}  // namespace

TEST_CASE("skip: FERRY_CHECK=1 fails the skipping rank's next differing call on every rank",
          "[skip][checked]") {
  ScopedCheckMode checked(true);
  ScopedDefaultTimeout timeout(std::chrono::seconds(30));  // a hang would show as slow
  const int world = GENERATE(2, 3);
  run_checked(world, skip_then_differ);
}

TEST_CASE("skip: run_ranks reports a rank that skipped the first of two identical all_reduces",
          "[skip]") {
  // Rank 1's only call matches the others' first: no op can tell. The others wait for it in
  // their second one and fail with PeerFailure when it returns; run_ranks then compares the
  // counts and raises MismatchError naming both. Both modes.
  const bool checked = GENERATE(false, true);
  ScopedCheckMode mode(checked);
  ScopedDefaultTimeout timeout(std::chrono::seconds(30));
  constexpr int kWorld = 3;
  std::array<std::string, kWorld> kinds;
  std::array<double, kWorld> sums{};
  const auto t0 = std::chrono::steady_clock::now();
  std::string message;
  try {
    ferry::run_ranks(kWorld, [&](Group& g) {
      const size_t r = static_cast<size_t>(g.rank());
      Tensor t = ferry::full({4}, static_cast<double>(g.rank() + 1));
      if (g.rank() != 1) ferry::all_reduce(t, g).wait();
      kinds[r] = error_kind(capture([&] { ferry::all_reduce(t, g).wait(); }));
      sums[r] = to_doubles(t)[0];
    });
  } catch (const ferry::MismatchError& e) {
    message = e.what();
  }
  INFO("checked " << checked << ": " << message);
  CHECK(contains(message, "ferry::run_ranks: the ranks did not issue the same collectives"));
  CHECK(contains(message, "rank 1 issued 1, rank "));
  CHECK((contains(message, "rank 0 issued 2") || contains(message, "rank 2 issued 2")));
  CHECK(contains(message, "failed waiting for rank 1's seq 1"));
  CHECK(seconds_since(t0) < 10.0);  // not the 30 s deadline
  CHECK(kinds[0] == "PeerFailure");
  CHECK(kinds[2] == "PeerFailure");
  CHECK(kinds[1] == "no exception");  // the silent wrong result the check reports
  CHECK(sums[1] == 6.0);              // rank 1's call was combined with the others' first
}

TEST_CASE("skip: run_ranks stays silent when the counts agree or a rank's error came first",
          "[skip]") {
  ScopedDefaultTimeout timeout(std::chrono::seconds(30));
  // Every rank issues the same: nothing to report.
  CHECK_NOTHROW(ferry::run_ranks(3, [](Group& g) {
    Tensor t = ferry::ones({4});
    ferry::all_reduce(t, g).wait();
    ferry::all_reduce(t, g).wait();
  }));
  // A rank whose function returned before issuing anything combined nothing: the waiting
  // ranks' PeerFailure is the whole story (as in the early-return case of test_timeout).
  std::string kind;
  try {
    ferry::run_ranks(2, [](Group& g) {
      if (g.rank() == 1) return;
      Tensor t = ferry::ones({4});
      ferry::all_reduce(t, g).wait();
    });
  } catch (...) {
    kind = error_kind(std::current_exception());
  }
  CHECK(kind == "PeerFailure");
}

TEST_CASE("skip: progress_mismatch compares only where no error was raised yet", "[skip]") {
  using ferry::detail::GroupProgress;
  using ferry::detail::progress_mismatch;
  const GroupProgress one{4, 1, {0, 1}, false, -1}, two{4, 2, {0, 1}, false, -1};
  const GroupProgress two_failed_for_1{4, 2, {0, 1}, true, 1};
  const GroupProgress two_failed_for_0{4, 2, {0, 1}, true, 0};
  const GroupProgress two_timed_out{4, 2, {0, 1}, true, -1};
  const GroupProgress none{4, 0, {0, 1}, false, -1};
  // Both healthy: reported on either side.
  CHECK(contains(progress_mismatch(1, one, 0, two),
                 "on group 4: rank 1 issued 1, rank 0 issued 2 (every rank"));
  CHECK(contains(progress_mismatch(0, two, 1, one), "rank 0 issued 2, rank 1 issued 1"));
  CHECK(progress_mismatch(0, two, 1, two).empty());
  // The peer failed waiting for this rank, which issued fewer: reported here.
  CHECK(contains(progress_mismatch(1, one, 0, two_failed_for_1),
                 "rank 0 issued 2 and failed waiting for rank 1's seq 1"));
  // The peer failed for another reason (a timeout, another rank's end): it raised that itself.
  CHECK(progress_mismatch(1, one, 0, two_timed_out).empty());
  CHECK(progress_mismatch(1, one, 0, two_failed_for_0).empty());
  // This rank's group failed: its error was raised already.
  CHECK(progress_mismatch(0, two_failed_for_1, 1, one).empty());
  // A rank that issued nothing combined nothing.
  CHECK(progress_mismatch(1, none, 0, two_failed_for_1).empty());
}

}  // namespace ftest
