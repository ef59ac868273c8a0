#include <ferry/runtime/progress.h>

#include <ferry/runtime/config.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry::detail {
namespace {

using Clock = std::chrono::steady_clock;

class ProgressDriver {
 public:
  void watch(std::weak_ptr<WorkState> state, std::function<void()> on_completed) {
    const Clock::time_point give_up_at =
        Clock::now() + 2 * default_timeout() + std::chrono::seconds(1);
    std::lock_guard<std::mutex> lock(mu_);
    list_.push_back({std::move(state), std::move(on_completed), give_up_at});
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    // A new op may finish within microseconds: look soon, not after the backed-off pause.
    fresh_ = true;
    cv_.notify_one();
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
  }

  uint64_t rounds() const { return rounds_.load(); }
  bool asleep() const { return asleep_.load(); }

 private:
  struct Watched {
    std::weak_ptr<WorkState> state;
    std::function<void()> on_completed;
    Clock::time_point give_up_at;
  };

  static constexpr auto kFirstPause = std::chrono::microseconds(50);
  static constexpr auto kLongestPause = std::chrono::microseconds(1000);

  void loop() {
    auto pause = std::chrono::duration_cast<Clock::duration>(kFirstPause);
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      if (list_.empty()) {
        asleep_.store(true);
        cv_.wait(lock, [&] { return stopping_ || !list_.empty(); });
        asleep_.store(false);
        pause = kFirstPause;
        continue;
      }
      fresh_ = false;
      std::vector<Watched> round = std::move(list_);
      list_.clear();
      lock.unlock();
      const bool completed_any = test_all(round);
      lock.lock();
      // Ops watched meanwhile are in list_ already; the ones still in flight join them.
      for (Watched& w : round) list_.push_back(std::move(w));
      pause = completed_any ? kFirstPause : std::min<Clock::duration>(2 * pause, kLongestPause);
      if (!list_.empty()) cv_.wait_for(lock, pause, [&] { return stopping_ || fresh_; });
    }
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
      // Switched off, the thread only reads the completion flag (non-virtual): an op then
      // moves only if its group's worker or a waiter moves it.
      if (drive_ ? state->is_completed() : state->WorkState::is_completed()) {
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
  std::thread thread_;
  bool stopping_ = false;
  bool fresh_ = false;
  std::atomic<uint64_t> rounds_{0};
  std::atomic<bool> asleep_{true};  // no thread yet: nothing runs
  const bool drive_ = config().progress_thread;
};

ProgressDriver& driver() {
  static auto* d = new ProgressDriver();  // never destroyed: Works may outlive statics
  return *d;
}

}  // namespace

void progress_in_background(std::weak_ptr<WorkState> state, std::function<void()> on_completed) {
  driver().watch(std::move(state), std::move(on_completed));
}

void stop_background_progress() { driver().stop(); }

uint64_t background_progress_rounds() { return driver().rounds(); }
bool background_progress_asleep() { return driver().asleep(); }

}  // namespace ferry::detail
