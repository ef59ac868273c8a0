// The progress thread (runtime/progress.h): an op that moves only when tested, as an MPI
// request does, completes while nobody waits for it; the thread sleeps once nothing is in
// flight and forgets dropped Works.
#include <ferry/runtime/progress.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

using namespace ferry;

namespace {

// Finishes at its n-th test and never otherwise: only someone testing it moves it.
class MovesWhenTested final : public detail::WorkState {
 public:
  explicit MovesWhenTested(int tests) : WorkState(std::string("moves when tested")), left_(tests) {}
  bool progress(detail::Mover who, std::chrono::milliseconds timeout,
                const std::shared_ptr<WorkState>& self) override {
    if (who != detail::Mover::kTester) return WorkState::progress(who, timeout, self);
    if (is_completed()) return true;
    if (left_.fetch_sub(1) <= 1) complete();
    return is_completed();
  }

 private:
  std::atomic<int> left_;
};

// Polls `done` until it holds or 30 s passed (a bound for a broken build, not a timing).
template <class Done>
bool eventually(Done&& done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

TEST_CASE("progress: an op that moves only when tested completes while nobody waits",
          "[progress]") {
  auto state = std::make_shared<MovesWhenTested>(5);
  Work work(state);
  std::promise<void> completed;
  work.progress_in_background([&] { completed.set_value(); });
  // Nobody tests or waits on this thread: only the progress thread can finish the op.
  REQUIRE(completed.get_future().wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  CHECK(state->is_completed());
  // Nothing in flight any more: the thread sleeps and runs no more rounds.
  REQUIRE(eventually([] { return detail::background_progress_asleep(); }));
  const uint64_t rounds = detail::background_progress_rounds();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(detail::background_progress_rounds() == rounds);
  CHECK(detail::background_progress_asleep());
}

TEST_CASE("progress: an op watched with a first look is not tested before it, then completes; "
          "ops watched meanwhile are not held up",
          "[progress]") {
  using Clock = std::chrono::steady_clock;
  constexpr auto kFirstLook = std::chrono::milliseconds(40);
  auto late = std::make_shared<MovesWhenTested>(1);
  std::atomic<int64_t> completed_after_us{-1};
  const auto t0 = Clock::now();
  detail::progress_in_background(late, [&] {
    completed_after_us =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
  }, kFirstLook);
  // An op watched without a first look meanwhile completes at once (within the 30 s bound), not
  // after the first one's look.
  auto soon = std::make_shared<MovesWhenTested>(2);
  std::promise<void> soon_done;
  Work(soon).progress_in_background([&] { soon_done.set_value(); });
  REQUIRE(soon_done.get_future().wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  REQUIRE(eventually([&] { return completed_after_us.load() >= 0; }));
  // The op completes at its first test: that test came no sooner than the first look.
  CHECK(completed_after_us.load() >=
        std::chrono::duration_cast<std::chrono::microseconds>(kFirstLook).count());
  CHECK(late->WorkState::is_completed());
}

namespace {

// A poller that counts its rounds and reports no work: only wakes ask for its rounds.
class CountingPoller final : public detail::BackgroundPoller {
 public:
  bool poll() override {
    rounds.fetch_add(1);
    last_round = std::chrono::steady_clock::now();
    return false;
  }
  std::atomic<int> rounds{0};
  std::atomic<std::chrono::steady_clock::time_point> last_round{};
};

}  // namespace

TEST_CASE("progress: a delayed wake's poller round comes no sooner than asked, then comes",
          "[progress]") {
  using Clock = std::chrono::steady_clock;
  static auto* poller = new CountingPoller();  // a poller lives as long as the process
  static const bool added = (detail::add_background_poller(poller), true);
  (void)added;
  REQUIRE(eventually([] { return detail::background_progress_asleep(); }));
  constexpr auto kAfter = std::chrono::milliseconds(40);
  const int before = poller->rounds.load();
  const auto t0 = Clock::now();
  detail::wake_background_progress_after(kAfter);
  // A later delayed wake does not move the round; it is one round for both.
  detail::wake_background_progress_after(2 * kAfter);
  REQUIRE(eventually([&] { return poller->rounds.load() > before; }));
  CHECK(poller->last_round.load() - t0 >= kAfter);
  // The thread sleeps again once the round found no work.
  REQUIRE(eventually([] { return detail::background_progress_asleep(); }));
  const int after = poller->rounds.load();
  std::this_thread::sleep_for(3 * kAfter);
  CHECK(poller->rounds.load() == after);
}

TEST_CASE("progress: ops their waiters completed before their first looks cost one round, not "
          "one each",
          "[progress]") {
  using Clock = std::chrono::steady_clock;
  constexpr auto kFirstLook = std::chrono::milliseconds(500);
  REQUIRE(eventually([] { return detail::background_progress_asleep(); }));
  const uint64_t before = detail::background_progress_rounds();
  constexpr int kOps = 5;
  std::vector<std::shared_ptr<MovesWhenTested>> ops;
  const auto t0 = Clock::now();
  for (int k = 0; k < kOps; ++k) {
    ops.push_back(std::make_shared<MovesWhenTested>(1 << 30));  // only complete() ends it
    detail::progress_in_background(ops.back(), nullptr, kFirstLook);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // first looks 2 ms apart
  }
  for (auto& op : ops) op->complete();  // as their waiters would
  const bool completed_in_time = Clock::now() - t0 < kFirstLook;
  REQUIRE(eventually([] { return detail::background_progress_asleep(); }));
  if (!completed_in_time) {  // a machine that stalled this thread for half a second
    WARN("the ops completed after their first look: nothing to conclude");
    return;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  // The first look's round finds every op complete and forgets them all: no round for the
  // later looks (a round at each would be kOps).
  CHECK(detail::background_progress_rounds() - before <= 2);
}

TEST_CASE("progress: a dropped Work is forgotten, and its callback never runs", "[progress]") {
  std::atomic<bool> called{false};
  {
    Work work(std::make_shared<MovesWhenTested>(1 << 30));
    work.progress_in_background([&] { called = true; });
  }
  REQUIRE(eventually([] { return detail::background_progress_asleep(); }));
  CHECK_FALSE(called.load());
}

TEST_CASE("progress: an empty Work is complete, its callback runs at once", "[progress]") {
  bool called = false;
  Work().progress_in_background([&] { called = true; });
  CHECK(called);
}

TEST_CASE("progress: stopping forgets what was watched; a later watch starts the thread again",
          "[progress]") {
  Work stuck(std::make_shared<MovesWhenTested>(1 << 30));
  stuck.progress_in_background();
  detail::stop_background_progress();
  auto state = std::make_shared<MovesWhenTested>(3);
  Work work(state);
  std::promise<void> completed;
  work.progress_in_background([&] { completed.set_value(); });
  REQUIRE(completed.get_future().wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  REQUIRE(eventually([] { return detail::background_progress_asleep(); }));
}

namespace {

// Completed by whoever runs it (as an op on its group's worker is), never by a test.
class RunByItsOwner final : public detail::WorkState {
 public:
  RunByItsOwner() : WorkState(std::string("run by its owner")) {}
  bool progress(detail::Mover who, std::chrono::milliseconds timeout,
                const std::shared_ptr<WorkState>& self) override {
    if (who == detail::Mover::kNobody) return true;
    if (who == detail::Mover::kTester) ++tests;
    return WorkState::progress(who, timeout, self);
  }
  std::atomic<int> tests{0};
};

}  // namespace

TEST_CASE("progress: an op its owner completes anyway wakes no thread; its callback runs at "
          "completion, on the completing thread",
          "[progress]") {
  REQUIRE(eventually([] { return detail::background_progress_asleep(); }));
  const uint64_t rounds = detail::background_progress_rounds();
  auto state = std::make_shared<RunByItsOwner>();
  Work work(state);
  std::thread::id called_on;
  work.progress_in_background([&] { called_on = std::this_thread::get_id(); });
  CHECK(called_on == std::thread::id());  // not yet: nothing completed it
  std::thread owner([&] { state->complete(); });
  const std::thread::id owner_id = owner.get_id();
  owner.join();
  CHECK(called_on == owner_id);
  CHECK(state->tests.load() == 0);  // nobody polled it
  CHECK(detail::background_progress_rounds() == rounds);
  // Watched after completion: the callback runs at once on the caller.
  bool late = false;
  work.progress_in_background([&] { late = true; });
  CHECK(late);
}
