#include <ferry/runtime/progress.h>

#include <ferry/runtime/config.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry::detail {
namespace {

using Clock = std::chrono::steady_clock;

class ProgressDriver {
 public:
  void watch(std::weak_ptr<WorkState> state, std::function<void()> on_completed,
             Clock::duration first_look) {
    const Clock::time_point now = Clock::now();
    const Clock::time_point give_up_at = now + 2 * default_timeout() + std::chrono::seconds(1);
    const Clock::time_point not_before = now + first_look;
    std::lock_guard<std::mutex> lock(mu_);
    list_.push_back({std::move(state), std::move(on_completed), give_up_at, not_before});
    start_locked();
    if (first_look.count() > 0) {
      // Looked at no sooner than asked: the thread is woken only when it would otherwise sleep
      // past that time (a thread that sleeps until its next round wakes in time anyway).
      if (not_before < sleeps_until_) {
        fresh_ = true;  // a round now, which finds the next time to look
        cv_.notify_one();
      }
      return;
    }
    // A new op may finish within microseconds: look soon, not after the backed-off pause.
    fresh_ = true;
    cv_.notify_one();
  }

  void add_poller(BackgroundPoller* poller) {
    std::lock_guard<std::mutex> lock(mu_);
    pollers_.push_back(poller);
  }

  // Called for every op a poller starts: it must stay cheap. The flag is set before `asleep_` is
  // read, and the thread sets `asleep_` before it reads the flag (both sequentially consistent),
  // so at least one of the two sees the other: the wake is either noticed by the thread before
  // it sleeps, or it notifies the sleeping thread (under the lock its wait checks the flag in).
  void wake() {
    // A round is due already and the thread awake: that round, which runs after this load,
    // sees what the caller published before calling (the thread clears the flag before it
    // polls). Skips the store, a locked instruction on a line the thread writes, for most of
    // a stream of small ops.
    if (poller_work_.load() && started_.load() && !asleep_.load()) return;
    poller_work_.store(true);
    if (started_.load() && !asleep_.load() && !long_sleep_.load()) return;
    std::lock_guard<std::mutex> lock(mu_);
    start_locked();
    cv_.notify_one();
  }

  // A round of the pollers no sooner than `at` (the earliest of all such asks). Locks only when
  // `at` is the new earliest: then the thread may sleep past it and must recompute its sleep.
  void wake_at(Clock::time_point at) {
    const int64_t ticks = at.time_since_epoch().count();
    int64_t due = poller_due_.load();
    while (ticks < due && !poller_due_.compare_exchange_weak(due, ticks)) {
    }
    if (ticks >= due) return;  // an earlier round is asked for already
    std::lock_guard<std::mutex> lock(mu_);
    start_locked();
    if (at < sleeps_until_) {
      fresh_ = true;
      cv_.notify_one();
    }
  }

  void stop() {
    std::thread thread;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      cv_.notify_one();
      thread = std::move(thread_);
    }
    if (thread.joinable()) thread.join();
    std::lock_guard<std::mutex> lock(mu_);
    list_.clear();
    stopping_ = false;
    started_.store(false);
  }

  uint64_t rounds() const { return rounds_.load(); }
  bool asleep() const { return asleep_.load(); }

 private:
  struct Watched {
    std::weak_ptr<WorkState> state;
    std::function<void()> on_completed;
    Clock::time_point give_up_at;
    Clock::time_point not_before;  // not tested before then (watch's first_look)
  };

  static constexpr auto kFirstPause = std::chrono::microseconds(50);
  static constexpr auto kLongestPause = std::chrono::microseconds(1000);
  // How long pollers are still stepped (every kLongestPause) after they last had work.
  static constexpr auto kPollersIdleBeforeSleep = std::chrono::milliseconds(50);
  // The shortest time between two rounds of the pollers that only a wake asked for: a stream of
  // ops that each finish at once (an 8 B all_reduce through shared memory) wakes the thread
  // with every op, and polling each time kept it running back to back, taking a core from the
  // ranks. A wake is never lost: the round it asks for runs at most this much later.
  static constexpr auto kPollerRoundEvery = std::chrono::microseconds(500);

  // Called with mu_ held.
  void start_locked() {
    if (thread_.joinable() || stopping_) return;
    asleep_.store(false);
    started_.store(true);
    thread_ = std::thread([this] { loop(); });
  }

  void loop() {
    auto pause = std::chrono::duration_cast<Clock::duration>(kFirstPause);
    Clock::time_point pollers_busy_until{};  // pollers are stepped until then
    Clock::time_point next_poller_round{};   // a wake's round runs no earlier (kPollerRoundEvery)
    std::vector<BackgroundPoller*> pollers;
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      const Clock::time_point now = Clock::now();
      const bool asked = poller_work_.load();
      const Clock::time_point due_at = poller_due_at();
      const bool pollers_due =
          (asked && now >= next_poller_round) || now < pollers_busy_until || now >= due_at;
      if (list_.empty() && !pollers_due) {
        if (asked || due_at != Clock::time_point::max()) {
          // A wake too soon after the last round, or a delayed one: its round comes then.
          const Clock::time_point until = asked ? std::min(next_poller_round, due_at) : due_at;
          sleep_until(lock, until);
          continue;
        }
        asleep_.store(true);
        sleeps_until_ = Clock::time_point::max();
        fresh_ = false;  // set by a delayed wake (wake_at) meanwhile
        cv_.wait(lock,
                 [&] { return stopping_ || !list_.empty() || poller_work_.load() || fresh_; });
        sleeps_until_ = Clock::time_point{};
        asleep_.store(false);
        pause = kFirstPause;
        continue;
      }
      fresh_ = false;
      // The two lists trade places, each keeping its capacity: watching an op and a round
      // allocate nothing once the lists have grown.
      std::vector<Watched>& round = round_;
      round.swap(list_);
      pollers = pollers_;  // the capacity stays: no allocation per round
      lock.unlock();
      bool completed_any = test_all(round);
      if (pollers_due) {
        next_poller_round = Clock::now() + kPollerRoundEvery;
        poller_work_.store(false);  // work added from here on sets it again
        if (Clock::now() >= due_at) {  // a delayed wake's round: asks made from here on count
          int64_t seen = due_at.time_since_epoch().count();
          poller_due_.compare_exchange_strong(seen, kNoRound);
        }
        bool busy = false;
        for (BackgroundPoller* p : pollers) busy = p->poll() || busy;
        if (busy) {
          pollers_busy_until = Clock::now() + kPollersIdleBeforeSleep;
          completed_any = completed_any || !round.empty();  // keep the Works' pause short
        }
      }
      lock.lock();
      // Ops watched meanwhile are in list_ already; the ones still in flight join them.
      for (Watched& w : round) list_.push_back(std::move(w));
      round.clear();
      pause = completed_any ? kFirstPause : std::min<Clock::duration>(2 * pause, kLongestPause);
      // Until the next round: the pause when an op may be tested now, else until the first one
      // that may, or the pollers' next round.
      const Clock::time_point after = Clock::now();
      Clock::time_point next = Clock::time_point::max();
      for (const Watched& w : list_)
        next = std::min(next, w.not_before <= after ? after + pause : w.not_before);
      if (after < pollers_busy_until) next = std::min(next, after + kLongestPause);
      if (next != Clock::time_point::max()) sleep_until(lock, std::min(next, poller_due_at()));
      // else: nothing in flight; the top of the loop sleeps unless a poller has work again
    }
  }
  // Sleeps until `until`, a new watch (fresh_), a stop or, for a sleep longer than the pause
  // between rounds, a poller's wake: during such a sleep (a delayed wake's round, an op's first
  // look) wake() notifies, as for a thread asleep, instead of leaving its round to a thread that
  // would not look for milliseconds.
  void sleep_until(std::unique_lock<std::mutex>& lock, Clock::time_point until) {
    const bool long_sleep = until - Clock::now() > kLongestPause;
    sleeps_until_ = until;
    fresh_ = false;
    if (long_sleep) long_sleep_.store(true);
    cv_.wait_until(lock, until, [&] {
      return stopping_ || fresh_ || Clock::now() >= until || (long_sleep && poller_work_.load());
    });
    if (long_sleep) long_sleep_.store(false);
    sleeps_until_ = Clock::time_point{};
  }

  // Tests each op once; drops from `round` those that completed, died or outlived their
  // deadline. Runs without the lock (a test may take microseconds; callbacks may watch more).
  bool test_all(std::vector<Watched>& round) {
    rounds_.fetch_add(1);
    bool completed_any = false;
    const Clock::time_point now = Clock::now();
    std::erase_if(round, [&](Watched& w) {
      std::shared_ptr<WorkState> state = w.state.lock();
      if (!state) return true;
      if (now < w.not_before) {
        // Not to be tested yet. One its waiter completed meanwhile is done with here, so that
        // the thread does not wake at its first look only to find it complete.
        if (!state->is_completed()) return false;
        if (w.on_completed) w.on_completed();
        return true;
      }
      // Switched off, the thread only reads the completion flag: an op then moves only if its
      // group's worker or a waiter moves it.
      if (drive_ ? state->progress(Mover::kTester, {}, state) : state->is_completed()) {
        completed_any = true;
        if (w.on_completed) w.on_completed();
        return true;
      }
      return now >= w.give_up_at;
    });
    return completed_any;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Watched> list_;
  std::vector<Watched> round_;  // the ops of the round being tested (the thread's own)
  std::vector<BackgroundPoller*> pollers_;  // never removed: they live as long as the process
  std::thread thread_;
  bool stopping_ = false;
  bool fresh_ = false;
  // When the thread's current sleep ends (max: asleep with nothing watched; the epoch: awake).
  // Under mu_.
  Clock::time_point sleeps_until_{};
  std::atomic<bool> started_{false};
  std::atomic<bool> poller_work_{false};
  // The earliest delayed wake's round (wake_at), as steady_clock ticks; kNoRound: none asked.
  static constexpr int64_t kNoRound = std::numeric_limits<int64_t>::max();
  std::atomic<int64_t> poller_due_{kNoRound};
  Clock::time_point poller_due_at() const {
    const int64_t ticks = poller_due_.load();
    return ticks == kNoRound ? Clock::time_point::max()
                             : Clock::time_point(Clock::duration(ticks));
  }
  std::atomic<uint64_t> rounds_{0};
  std::atomic<bool> asleep_{true};  // no thread yet: nothing runs
  std::atomic<bool> long_sleep_{false};  // in a sleep longer than a round's pause (sleep_until)
  const bool drive_ = config().progress_thread;
};

ProgressDriver& driver() {
  static auto* d = new ProgressDriver();  // never destroyed: Works may outlive statics
  return *d;
}

}  // namespace

void progress_in_background(std::weak_ptr<WorkState> state, std::function<void()> on_completed,
                            std::chrono::microseconds first_look) {
  driver().watch(std::move(state), std::move(on_completed), first_look);
}

void add_background_poller(BackgroundPoller* poller) { driver().add_poller(poller); }

void wake_background_progress() { driver().wake(); }

void wake_background_progress_after(std::chrono::microseconds after) {
  driver().wake_at(Clock::now() + after);
}

void wake_background_progress_at(Clock::time_point at) { driver().wake_at(at); }

void stop_background_progress() { driver().stop(); }

uint64_t background_progress_rounds() { return driver().rounds(); }
bool background_progress_asleep() { return driver().asleep(); }

}  // namespace ferry::detail
