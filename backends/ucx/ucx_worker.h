// A UCP worker (on a context it may share with a sibling worker), and how threads wait on it
// (internal).
//
// Every UCP call on the worker is made under lock(): ferry posts from callers' threads and from
// each group's worker thread, and a mutex of our own (with UCS_THREAD_MODE_SERIALIZED) is
// cheaper and more predictable than UCX's multi-thread mode. Completion callbacks therefore run
// under the lock too.
//
// Waiting (wait_until): a waiter first polls the worker for a short while, progressing only if
// no other thread is (try_lock), because a message from a peer that is running usually arrives
// within microseconds and waking a sleeping thread costs ~20 us here. Then it blocks: under the
// lock it drains the worker, arms it (ucp_worker_arm) and sleeps in poll() on the worker's event
// fd until UCX has news, a slice ends or the deadline passes. A thread whose progress completed
// something while others sleep signals the worker (ucp_worker_signal), so that a sleeper whose
// request was completed by someone else's progress wakes up at once. The sleep is also cut into
// slices of at most kSleepSlice so that UCX's keepalive (which detects dead peers) runs even
// when every thread waits.
//
// Deferred work: what must run neither inside a UCX callback nor under the lock (a CMA read of
// several MiB, see ucx_cma.h) is queued by defer_locked and run, without the lock, by whichever
// thread waits or tests next, one job per progress pass (a waiter checks its own op between
// jobs and returns once it is done); a waiter does not sleep while jobs are queued. So a peer's
// transfer moves even when every thread of this process waits on something else (a send whose
// peer waits on us), as UCX's own progress does.
//
// How long to poll before blocking depends on whether this process has a core to itself: with
// more local ranks than cores a poller steals the core its peer needs, so it only polls for
// kSpinFor with yields in between.
#pragma once

#include <ferry/backends/transport.h>

#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

struct pollfd;

namespace ferry::detail {

// What a waiter does under the lock before it sleeps, and more fds to sleep on (UcxComm: the
// pidfds of local peers, see peer_watch.h).
class UcxSleepHook {
 public:
  virtual ~UcxSleepHook() = default;
  virtual void before_sleep_locked() = 0;
  virtual void append_wake_fds_locked(std::vector<pollfd>& fds) = 0;
};

class UcxWorker {
 public:
  // `world_size` sizes UCX's endpoint tables.
  explicit UcxWorker(int world_size);
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;
  // A second worker on this one's UCP context, with queues of its own: the side channel of
  // ucx_transport.cpp. The context lives as long as either worker.
  std::unique_ptr<UcxWorker> sibling() const;

  ucp_context_h context() const { return context_.get(); }
  ucp_worker_h worker() const { return worker_; }
  std::unique_lock<std::mutex> lock() { return std::unique_lock<std::mutex>(mu_); }

  // The worker's address, for the peers' endpoints.
  std::string address() const { return address_; }

  // Poll long (no other local rank competes for our core) or briefly with yields.
  void set_oversubscribed(bool oversubscribed) { oversubscribed_.store(oversubscribed); }

  // Set under the lock, before any waiting; null to remove.
  void set_sleep_hook(UcxSleepHook* hook) { hook_ = hook; }

  // Callbacks (run under the lock) call this when they completed a request.
  void note_completion() { completions_.fetch_add(1, std::memory_order_relaxed); }

  // Wakes the sleeping waiters (one of whose requests may have completed); under the lock.
  void wake_sleepers_locked();

  // Queues `job` (see above); under the lock.
  void defer_locked(std::function<void()> job);
  // Runs the oldest queued job, if any, without the lock. True if it ran one.
  bool run_one_deferred();

  // Progresses until nothing more happens; the caller holds the lock.
  void progress_locked();
  // One progress pass if no other thread is progressing, then at most one deferred job (a job
  // is a CMA read: Request::test() must stay short). Never waits for a peer.
  void try_progress();
  // Until done() holds (true) or `deadline` passes (false). done() must be cheap and lock-free.
  bool wait_until(const std::function<bool()>& done, Clock::time_point deadline);

  static constexpr auto kLongSpin = std::chrono::microseconds(60);
  static constexpr auto kSleepSlice = std::chrono::milliseconds(20);

 private:
  using Context = std::shared_ptr<std::remove_pointer_t<ucp_context_h>>;
  explicit UcxWorker(Context context);
  void create_worker();  // on context_
  void sleep_on_fds(std::vector<pollfd>& fds, Clock::time_point deadline);

  Context context_;
  ucp_worker_h worker_ = nullptr;
  int event_fd_ = -1;
  std::string address_;
  std::mutex mu_;
  std::atomic<int> sleepers_{0};
  std::atomic<uint64_t> completions_{0};
  std::atomic<bool> oversubscribed_{true};
  UcxSleepHook* hook_ = nullptr;  // under mu_
  std::deque<std::function<void()>> deferred_;  // under mu_
  std::atomic<size_t> deferred_count_{0};       // its size, read without the lock
};

// "UCS_ERR_..." and UCX's description of `status`.
std::string ucx_status_str(ucs_status_t status);

}  // namespace ferry::detail
