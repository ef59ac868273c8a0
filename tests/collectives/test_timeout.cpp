// No silent hang: a rank that skips a collective makes the others fail with TimeoutError naming
// the op, the sequence number and (where the waiter depends on it directly) the missing rank,
// and poisons the group; Work::wait(timeout) has its own deadline; calls that disagree across
// ranks fail with MismatchError; a failing rank makes run_ranks rethrow its error and its peers
// fail with PeerFailure instead of waiting for the deadline.
//
// A skipped rank stays alive (waiting on a latch) until the others are done: it is late, not
// dead, so what the others see is a timeout and not a peer failure.
#include "test_helpers.h"

#include <catch2/catch.hpp>

#include <array>
#include <typeinfo>
#include <functional>
#include <latch>
#include <thread>
#include <cctype>

using namespace ftest;

namespace {

Work issue(const std::string& op, Tensor& t, const Group& g) {
  return op == "barrier" ? ferry::barrier(g) : ferry::all_reduce(t, g);
}

// Hand-written matchers: std::regex is avoided on rank threads (its locale use races under
// ThreadSanitizer).
bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

// True when the whole number `n` appears at `pos` (not inside a longer number).
bool number_at(const std::string& msg, size_t pos, uint64_t n) {
  const std::string digits = std::to_string(n);
  return msg.compare(pos, digits.size(), digits) == 0 &&
         (pos + digits.size() == msg.size() || !is_digit(msg[pos + digits.size()]));
}

bool names_sequence(const std::string& msg, uint64_t seq) {
  // "seq" or "sequence" followed, within a few non-digits, by the op's sequence number (taken
  // before or after the op was counted): "(seq 3)", "sequence number 3", ...
  std::string lower = msg;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (size_t at = lower.find("seq"); at != std::string::npos; at = lower.find("seq", at + 1)) {
    size_t pos = at + 3;
    for (int skipped = 0; pos < lower.size() && !is_digit(lower[pos]) && skipped < 20; ++skipped) ++pos;
    if (pos < lower.size() && is_digit(lower[pos]) && (number_at(lower, pos, seq) || number_at(lower, pos, seq + 1)))
      return true;
  }
  return false;
}

bool names_rank(const std::string& msg, int rank) {
  // "rank K", but not the waiter's own "rank r/W" description.
  const std::string needle = "rank " + std::to_string(rank);
  for (size_t at = msg.find(needle); at != std::string::npos; at = msg.find(needle, at + 1)) {
    const size_t end = at + needle.size();
    const bool word_start = at == 0 || !std::isalnum(static_cast<unsigned char>(msg[at - 1]));
    if (word_start && (end == msg.size() || (!is_digit(msg[end]) && msg[end] != '/'))) return true;
  }
  // Or K in a list "ranks 1, 3" (under load another rank may be late too), but not in a group's
  // description "[world ranks 0,1]".
  for (size_t at = msg.find("ranks "); at != std::string::npos; at = msg.find("ranks ", at + 1)) {
    if (at >= 6 && msg.compare(at - 6, 6, "world ") == 0) continue;
    size_t pos = at + 6;
    for (;;) {
      size_t digits = pos;
      while (digits < msg.size() && is_digit(msg[digits])) ++digits;
      if (digits == pos) break;
      if (std::stoi(msg.substr(pos, digits - pos)) == rank) return true;
      if (msg.compare(digits, 2, ", ") != 0) break;
      pos = digits + 2;
    }
  }
  return false;
}

// The waiting side: issue `op` (which one rank skipped), expect TimeoutError within bounds,
// then a poisoned group whose next call fails at once.
void expect_timeout(Ctx& ctx, Group& g, const std::string& op, int skipped, bool names_skipped,
                    double deadline_s) {
  const std::string w = where(g, op + " skipped by rank " + std::to_string(skipped));
  Tensor t = ferry::ones({16});
  const uint64_t seq = g.sequence_number();
  Work work = issue(op, t, g);
  const auto t0 = std::chrono::steady_clock::now();
  const std::exception_ptr e = capture([&] { work.wait(); });
  const double s = seconds_since(t0);
  const std::string msg = what_of(e);
  ctx.expect(error_kind(e) == "TimeoutError",
             [&] { return w + ": expected TimeoutError, got " + error_kind(e) + ": " + msg; });
  ctx.expect(s >= 0.5 * deadline_s && s < deadline_s + 10.0,
             [&] { return w + ": timed out after " + std::to_string(s) + " s"; });
  FT_CHECK(ctx, msg.find(op) != std::string::npos, w + ": message names the op: " + msg);
  FT_CHECK(ctx, names_sequence(msg, seq), w + ": message names the sequence number " + std::to_string(seq) + ": " + msg);
  if (names_skipped)
    FT_CHECK(ctx, names_rank(msg, skipped), w + ": message names the missing rank: " + msg);
  FT_CHECK(ctx, g.poisoned(), w + ": a timeout poisons the group");
  FT_CHECK(ctx, !g.poison_reason().empty(), w + ": poison_reason");
  const auto t1 = std::chrono::steady_clock::now();
  Work later;
  const std::exception_ptr again = capture([&] { later = ferry::barrier(g); });
  const double s1 = seconds_since(t1);
  ctx.expect(again != nullptr && error_kind(again).rfind("non-ferry", 0) != 0,
             [&] { return w + ": a call on a poisoned group must throw a ferry::Error at once, got " + error_kind(again); });
  ctx.expect(s1 < 0.5 * deadline_s, [&] { return w + ": the call on the poisoned group took " + std::to_string(s1) + " s"; });
  if (!again) capture([&] { later.wait(std::chrono::milliseconds(100)); });
}

}  // namespace

TEST_CASE("timeout: the message matchers themselves", "[timeout]") {
  CHECK(names_sequence("all_reduce (seq 3) on group 0", 3));
  CHECK(names_sequence("all_reduce (seq 3) on group 0", 2));  // counted before or after
  CHECK(names_sequence("barrier: Sequence number 12 timed out", 12));
  CHECK_FALSE(names_sequence("all_reduce (seq 13) [engine.cpp:3]", 3));
  CHECK_FALSE(names_sequence("all_reduce timed out [engine.cpp:3]", 3));
  CHECK(names_rank("timed out; not heard from rank 1;", 1));
  CHECK(names_rank("waiting for rank 0", 0));
  CHECK_FALSE(names_rank("group 0 [world ranks 0,1] rank 1/2 timed out", 1));
  CHECK_FALSE(names_rank("not heard from rank 10", 1));
  CHECK(names_rank("timed out; ranks 1, 3 did not reach this collective;", 3));
  CHECK(names_rank("timed out; ranks 1, 3 did not reach this collective;", 1));
  CHECK_FALSE(names_rank("timed out; ranks 1, 3 did not reach this collective;", 2));
  CHECK_FALSE(names_rank("group 0 [world ranks 0,1] rank 1/2 timed out", 0));
}

TEST_CASE("timeout: the only peer skips (world 2)", "[timeout]") {
  ScopedDefaultTimeout timeout(std::chrono::milliseconds(1000));
  const int skipped = GENERATE(0, 1);
  const std::string op = GENERATE(as<std::string>{}, "barrier", "all_reduce");
  INFO(op << " skipped by rank " << skipped);
  std::latch waiters_done(1);
  run_checked(2, [&](Group& g, Ctx& ctx) {
    const CountDownOnExit done(waiters_done, g.rank() != skipped);
    for (int i = 0; i < 3; ++i) ferry::barrier(g).wait();  // a sequence number other than 0
    if (g.rank() == skipped) {
      waiters_done.wait();
      return;
    }
    expect_timeout(ctx, g, op, skipped, /*names_skipped=*/true, 1.0);
  });
}

TEST_CASE("timeout: one of 3 or 4 ranks skips", "[timeout]") {
  ScopedDefaultTimeout timeout(std::chrono::milliseconds(500));
  const int world = GENERATE(3, 4);
  const int skipped = GENERATE_COPY(1, world - 1);
  const std::string op = GENERATE(as<std::string>{}, "barrier", "all_reduce");
  INFO(op << " skipped by rank " << skipped << " of " << world);
  std::latch waiters_done(world - 1);
  run_checked(world, [&](Group& g, Ctx& ctx) {
    const CountDownOnExit done(waiters_done, g.rank() != skipped);
    for (int i = 0; i < 2; ++i) ferry::barrier(g).wait();
    if (g.rank() == skipped) {
      waiters_done.wait();
      return;
    }
    // Whichever rank a waiter depends on directly, the exchange after the deadline finds the
    // rank that never reached the collective, so every waiter names it.
    expect_timeout(ctx, g, op, skipped, /*names_skipped=*/true, 0.5);
  });
}

TEST_CASE("timeout: a rank that gives up waiting makes a late peer fail fast", "[timeout]") {
  ScopedDefaultTimeout timeout(std::chrono::milliseconds(3000));
  std::latch gave_up(1);
  run_checked(2, [&](Group& g, Ctx& ctx) {
    const std::string w = where(g, "rank 0 gives up after 100 ms, rank 1 arrives later");
    if (g.rank() == 0) {
      const CountDownOnExit done(gave_up, true);
      Tensor t = ferry::ones({4});
      Work work = ferry::all_reduce(t, g);
      const std::exception_ptr e = capture([&] { work.wait(std::chrono::milliseconds(100)); });
      FT_CHECK(ctx, error_kind(e) == "TimeoutError", w + ": expected TimeoutError, got " + error_kind(e));
      FT_CHECK(ctx, g.poisoned(), w + ": giving up poisons the group");
      return;
    }
    gave_up.wait();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 0's op has stopped
    Tensor t = ferry::ones({4});
    const auto t0 = std::chrono::steady_clock::now();
    const std::exception_ptr e = capture([&] { ferry::all_reduce(t, g).wait(); });
    const double s = seconds_since(t0);
    ctx.expect(error_kind(e) == "PeerFailure",
               [&] { return w + ": expected PeerFailure, got " + error_kind(e) + ": " + what_of(e); });
    ctx.expect(s < 1.0, [&] { return w + ": failed after " + std::to_string(s) + " s, not well before the 3 s deadline"; });
  });
}

namespace {

// Runs `body` on rank 0 of two, whose peer joins nothing and returns once rank 0 is done.
void with_rank1_absent(const std::function<void(Group&, Ctx&)>& body) {
  std::latch waiter_done(1);
  run_checked(2, [&](Group& g, Ctx& ctx) {
    const CountDownOnExit done(waiter_done, g.rank() == 0);
    if (g.rank() == 1) {
      waiter_done.wait();
      return;
    }
    body(g, ctx);
  });
}

}  // namespace

TEST_CASE("timeout: Work::wait(50 ms) on an op that cannot complete", "[timeout]") {
  ScopedDefaultTimeout timeout(std::chrono::milliseconds(1000));  // the 50 ms must be what fires
  with_rank1_absent([&](Group& g, Ctx& ctx) {
    const std::string w = where(g, "all_reduce with rank 1 absent, wait(50 ms)");
    Tensor t = ferry::ones({4});
    Work work = ferry::all_reduce(t, g);
    FT_CHECK(ctx, !work.is_completed(), w + ": cannot be complete");
    const auto t0 = std::chrono::steady_clock::now();
    const std::exception_ptr e = capture([&] { work.wait(std::chrono::milliseconds(50)); });
    const double s = seconds_since(t0);
    ctx.expect(error_kind(e) == "TimeoutError",
               [&] { return w + ": expected TimeoutError, got " + error_kind(e) + ": " + what_of(e); });
    ctx.expect(s >= 0.04 && s < 0.5, [&] { return w + ": returned after " + std::to_string(s) + " s"; });
    FT_CHECK(ctx, what_of(e).find("all_reduce") != std::string::npos, w + ": names the op: " + what_of(e));
    FT_CHECK(ctx, g.poisoned(), w + ": an expired wait poisons the group");
  });
}

// Each kind of Work gives up in its own way when a user's wait expires (WorkState::progress):
// an op queued on the group's worker, and a recv (which also withdraws its message), poison the
// group as an op started at issue does (the case above).
TEST_CASE("timeout: an expired wait poisons the group whichever Work carries the op",
          "[timeout]") {
  ScopedDefaultTimeout timeout(std::chrono::milliseconds(1000));  // the 50 ms must be what fires
  for (const std::string kind : {"queued all_reduce", "recv"}) {
    // The ring is never started at issue: the op goes to the group's worker.
    ScopedAlgorithm ring("all_reduce:ring");
    with_rank1_absent([&](Group& g, Ctx& ctx) {
      const std::string w = where(g, kind + " with rank 1 absent, wait(50 ms)");
      Tensor t = ferry::ones({4});
      Work work = kind == "recv" ? ferry::recv(t, 1, g) : ferry::all_reduce(t, g);
      FT_CHECK(ctx, !work.is_completed(), w + ": cannot be complete");
      const std::exception_ptr e = capture([&] { work.wait(std::chrono::milliseconds(50)); });
      ctx.expect(error_kind(e) == "TimeoutError",
                 [&] { return w + ": expected TimeoutError, got " + error_kind(e) + ": " + what_of(e); });
      const std::string op = kind == "recv" ? "recv" : "all_reduce";
      FT_CHECK(ctx, what_of(e).find(op) != std::string::npos, w + ": names the op: " + what_of(e));
      FT_CHECK(ctx, g.poisoned(), w + ": an expired wait poisons the group");
      FT_CHECK(ctx, g.poison_reason().find("not completed within 50 ms") != std::string::npos,
               w + ": the poison quotes the expired wait: " + g.poison_reason());
    });
  }
}

TEST_CASE("mismatch: ranks disagree about the size", "[timeout][mismatch]") {
  ScopedDefaultTimeout timeout(std::chrono::milliseconds(3000));
  const std::string op = GENERATE(as<std::string>{}, "all_reduce", "broadcast", "all_gather");
  INFO(op << ": rank 0 passes 10 elements, rank 1 passes 12");
  std::array<std::string, 2> kinds;
  std::array<std::string, 2> messages;
  run_checked(2, [&](Group& g, Ctx& ctx) {
    const int n = g.rank() == 0 ? 10 : 12;
    Tensor t = ferry::ones({n});
    Tensor out = ferry::zeros({2 * n});
    const std::exception_ptr e = capture([&] {
      Work w = op == "all_reduce" ? ferry::all_reduce(t, g)
               : op == "broadcast" ? ferry::broadcast(t, 0, g)
                                   : ferry::all_gather(t, out, g);
      w.wait();
    });
    kinds[static_cast<size_t>(g.rank())] = error_kind(e);
    messages[static_cast<size_t>(g.rank())] = what_of(e);
    FT_CHECK(ctx, e != nullptr, where(g, op + " with mismatched sizes must fail"));
  });
  for (size_t r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << kinds[r] << ": " << messages[r]);
    CHECK((kinds[r] == "MismatchError" || kinds[r] == "TimeoutError" || kinds[r] == "PeerFailure"));
  }
  CHECK((kinds[0] == "MismatchError" || kinds[1] == "MismatchError"));
  for (size_t r = 0; r < 2; ++r)
    if (kinds[r] == "MismatchError") CHECK(messages[r].find(op) != std::string::npos);
}

TEST_CASE("peer failure: run_ranks rethrows the first failure; peers fail fast", "[timeout][peer_failure]") {
  ScopedDefaultTimeout timeout(std::chrono::milliseconds(2000));
  const int world = GENERATE(2, 3);
  std::vector<std::string> kinds(static_cast<size_t>(world));
  std::vector<double> seconds(static_cast<size_t>(world), 0.0);
  const std::exception_ptr thrown = capture([&] {
    ferry::run_ranks(world, [&](Group& g) {
      if (g.rank() == 1) throw ferry::InvalidArgument("deliberate failure of rank 1");
      Tensor t = ferry::ones({8});
      const auto t0 = std::chrono::steady_clock::now();
      const std::exception_ptr e = capture([&] { ferry::all_reduce(t, g).wait(); });
      seconds[static_cast<size_t>(g.rank())] = seconds_since(t0);
      kinds[static_cast<size_t>(g.rank())] = error_kind(e);
    });
  });
  REQUIRE(thrown != nullptr);
  CHECK(error_kind(thrown) == "InvalidArgument");  // the type is kept
  const std::string msg = what_of(thrown);
  CHECK(msg.rfind("rank 1: ", 0) == 0);
  CHECK(msg.find("deliberate failure of rank 1") != std::string::npos);
  int peer_failures = 0;
  // Every survivor fails fast: the ones that waited on rank 1 see it dead, and give up on the
  // group, which fails the ones waiting on them in turn.
  for (int r = 0; r < world; ++r) {
    if (r == 1) continue;
    INFO("rank " << r << " got " << kinds[r] << " after " << seconds[r] << " s");
    CHECK(kinds[r] == "PeerFailure");
    if (kinds[r] == "PeerFailure") {
      ++peer_failures;
      CHECK(seconds[r] < 1.0);  // well before the 2 s deadline
    }
  }
  CHECK(peer_failures == world - 1);
}

TEST_CASE("early return: a rank whose function returns makes the peers waiting for it fail at once, naming it",
          "[timeout][peer_failure]") {
  // The deadline is far: a peer that waited for it would show up as a slow TimeoutError.
  ScopedDefaultTimeout timeout(std::chrono::seconds(30));
  const std::string op = GENERATE(std::string("all_reduce"), std::string("barrier"));
  constexpr int kWorld = 3;
  std::array<std::string, kWorld> kinds, messages;
  std::array<double, kWorld> seconds{};
  std::array<bool, kWorld> failed_again{};
  ferry::run_ranks(kWorld, [&](Group& g) {
    const size_t r = static_cast<size_t>(g.rank());
    if (g.rank() == 1) return;  // right after init, as a main() that returns early
    Tensor t = ferry::ones({100});
    const auto t0 = std::chrono::steady_clock::now();
    const std::exception_ptr e = capture([&] { issue(op, t, g).wait(); });
    seconds[r] = seconds_since(t0);
    kinds[r] = error_kind(e);
    messages[r] = what_of(e);
    // The group is poisoned: the next call fails at once too.
    // Recorded here and checked on the main thread: Catch2's assertions are not thread-safe.
    failed_again[r] = capture([&] { issue(op, t, g).wait(); }) != nullptr;
  });
  for (int r : {0, 2}) {
    INFO(op << ": rank " << r << " got " << kinds[r] << " after " << seconds[r]
            << " s: " << messages[r]);
    CHECK(failed_again[static_cast<size_t>(r)]);
    CHECK(kinds[r] == "PeerFailure");
    CHECK(seconds[r] < 5.0);  // not the 30 s deadline
    // Every survivor names rank 1: directly, or through the peer that gave up because of it.
    CHECK(messages[r].find("rank 1 ") != std::string::npos);
    CHECK(messages[r].find(op) != std::string::npos);
  }
  CHECK(messages[0].find("ended (its function returned)") != std::string::npos);
}

TEST_CASE("timeout: the error is a plain ferry::TimeoutError whose text states the deadline",
          "[timeout]") {
  ScopedDefaultTimeout timeout(std::chrono::milliseconds(600));
  std::string message;
  bool plain_type = false;
  std::latch waiter_done(1);
  ferry::run_ranks(2, [&](Group& g) {
    if (g.rank() == 1) {  // late, not dead: it skips the collective and stays alive
      waiter_done.wait();
      return;
    }
    Tensor t = ferry::ones({4});
    const std::exception_ptr e = capture([&] { ferry::all_reduce(t, g).wait(); });
    try {
      if (e) std::rethrow_exception(e);
    } catch (const ferry::TimeoutError& err) {
      // Not an internal subclass: an uncaught one is named by its type.
      plain_type = typeid(err) == typeid(ferry::TimeoutError);
      message = err.what();
    } catch (...) {
    }
    waiter_done.count_down();
  });
  INFO(message);
  CHECK(plain_type);
  CHECK(message.find("timed out after its 600 ms deadline") != std::string::npos);
}
