#include <ferry/backends/ucx/ucx_worker.h>

#include <ferry/backends/ucx/ucx_settings.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/idle_work.h>
#include <ferry/runtime/log.h>
#include <ferry/runtime/object_pool.h>
#include <ferry/runtime/wait_policy.h>

#include <poll.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace ferry::detail {

std::string ucx_status_str(ucs_status_t status) {
  return str(ucs_status_string(status), " (status ", static_cast<int>(status), ")");
}

namespace {

void check_ucx(ucs_status_t status, const char* call) {
  FERRY_CHECK(status == UCS_OK, TransportError, "ucx transport: ", call, " failed: ",
              ucx_status_str(status));
}

}  // namespace

UcxWorker::UcxWorker(int world_size) {
  apply_ucx_transport_defaults();
  ucp_config_t* config = nullptr;
  check_ucx(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
  apply_ucx_defaults(config);

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                      UCP_PARAM_FIELD_ESTIMATED_NUM_EPS | UCP_PARAM_FIELD_NAME;
  // Tags carry the data, one active message carries "I gave up on this group", and WAKEUP
  // gives the event fd waiters sleep on.
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  params.estimated_num_eps = static_cast<size_t>(world_size);
  params.name = "ferry";
  ucp_context_h context = nullptr;
  const ucs_status_t status = ucp_init(&params, config, &context);
  ucp_config_release(config);
  check_ucx(status, "ucp_init");
  context_ = Context(context, &ucp_cleanup);
  create_worker();
}

UcxWorker::UcxWorker(Context context) : context_(std::move(context)) { create_worker(); }

std::unique_ptr<UcxWorker> UcxWorker::sibling() const {
  return std::unique_ptr<UcxWorker>(new UcxWorker(context_));
}

void UcxWorker::create_worker() {
  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // we hold mu_ around every call
  check_ucx(ucp_worker_create(context_.get(), &wparams, &worker_), "ucp_worker_create");
  ucp_address_t* address = nullptr;
  size_t length = 0;
  ucs_status_t s = ucp_worker_get_efd(worker_, &event_fd_);
  if (s == UCS_OK) s = ucp_worker_get_address(worker_, &address, &length);
  if (s != UCS_OK) {
    ucp_worker_destroy(worker_);
    check_ucx(s, "ucp_worker_get_efd / ucp_worker_get_address");
  }
  address_.assign(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(worker_, address);
}

UcxWorker::~UcxWorker() {
  ucp_worker_destroy(worker_);  // before the context, which the last worker's end releases
}

void UcxWorker::wake_sleepers_locked() {
  if (sleepers_.load(std::memory_order_acquire) > 0) ucp_worker_signal(worker_);
}

void UcxWorker::defer_locked(std::function<void()> job) {
  deferred_.push_back(std::move(job));
  deferred_count_.store(deferred_.size(), std::memory_order_release);
  wake_sleepers_locked();  // a sleeper may be the only thread left to run it
}

bool UcxWorker::run_one_deferred() {
  if (deferred_count_.load(std::memory_order_acquire) == 0) return false;
  std::function<void()> job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (deferred_.empty()) return false;
    job = std::move(deferred_.front());
    deferred_.pop_front();
    deferred_count_.store(deferred_.size(), std::memory_order_release);
  }
  job();
  return true;
}

void UcxWorker::progress_locked() {
  const uint64_t before = completions_.load(std::memory_order_relaxed);
  // Bounded: a steady stream of events must not keep one caller here forever.
  for (int i = 0; i < 64 && ucp_worker_progress(worker_) != 0; ++i) {
  }
  if (completions_.load(std::memory_order_relaxed) != before)
    wake_sleepers_locked();  // a sleeper's request may be among those completed
}

void UcxWorker::try_progress() {
  {
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (lock.owns_lock()) progress_locked();
  }
  run_one_deferred();
}

bool UcxWorker::wait_until(const std::function<bool()>& done, Clock::time_point deadline) {
  for (;;) {
    if (done()) return true;
    // Poll first: the message usually comes within microseconds.
    const bool oversubscribed = oversubscribed_.load(std::memory_order_relaxed);
    const auto spin_until = Clock::now() + (oversubscribed ? kSpinFor : kLongSpin);
    do {
      try_progress();
      if (done()) return true;
      if (run_idle_work()) {
        // this thread's own work ran one piece instead of spinning (idle_work.h)
      } else if (oversubscribed) {
        std::this_thread::yield();  // let the peer we wait for have the core
      } else {
        for (int i = 0; i < 32; ++i) FERRY_CPU_RELAX();
      }
    } while (Clock::now() < spin_until);
    if (Clock::now() >= deadline) return false;
    if (run_idle_work()) continue;  // work of its own before sleeping
    // Then block. sleepers_ goes up before the last check, under the lock, so a thread that
    // completes our request after the check sees a sleeper and signals.
    ucs_status_t armed;
    // A list from this thread's spares, kept from sleep to sleep: a wait that sleeps allocates
    // nothing. Not a plain thread_local: finalize() runs from an exit handler, after the main
    // thread's thread_locals were destroyed, and its waits sleep too (a ScopedSpare then makes
    // a list of its own).
    ScopedSpare<std::vector<pollfd>> spare;
    std::vector<pollfd>& fds = *spare;
    fds.assign(1, pollfd{event_fd_, POLLIN, 0});
    {
      std::lock_guard<std::mutex> lock(mu_);
      sleepers_.fetch_add(1, std::memory_order_acq_rel);
      if (hook_ != nullptr) hook_->before_sleep_locked();
      progress_locked();
      armed = done() || !deferred_.empty() ? UCS_ERR_ALREADY_EXISTS : ucp_worker_arm(worker_);
      if (hook_ != nullptr) hook_->append_wake_fds_locked(fds);
    }
    if (armed == UCS_OK) sleep_on_fds(fds, deadline);
    sleepers_.fetch_sub(1, std::memory_order_acq_rel);
    // UCS_ERR_BUSY: events arrived meanwhile; progress again.
  }
}

void UcxWorker::sleep_on_fds(std::vector<pollfd>& fds, Clock::time_point deadline) {
  const auto until = std::min(deadline, Clock::now() + kSleepSlice);
  const auto left = std::max(until - Clock::now(), Clock::duration::zero());
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  // EINTR and spurious wakeups are harmless: the caller re-checks and sleeps again.
  (void)ppoll(fds.data(), fds.size(), &ts, nullptr);
}

}  // namespace ferry::detail
