#include <ferry/runtime/work.h>

#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/idle_work.h>
#include <ferry/runtime/log.h>
#include <ferry/runtime/progress.h>
#include <ferry/runtime/wait_policy.h>

namespace ferry {
namespace detail {

void WorkState::complete(std::vector<Tensor> outputs) {
  if (mark_completed(std::move(outputs))) run_completion_hooks();
}

void WorkState::fail(std::exception_ptr error) {
  if (mark_failed(std::move(error))) run_completion_hooks();
}

bool WorkState::mark_completed(std::vector<Tensor> outputs) {
  bool hooks = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!outputs.empty()) outputs_ = std::move(outputs);
    done_.store(true, std::memory_order_release);
    hooks = first_hook_ != nullptr;
  }
  cv_.notify_all();
  return hooks;
}

bool WorkState::mark_failed(std::exception_ptr error) {
  bool hooks = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::move(error);
    failed_.store(true, std::memory_order_release);
    done_.store(true, std::memory_order_release);
    hooks = first_hook_ != nullptr;
  }
  cv_.notify_all();
  return hooks;
}

void WorkState::on_completion(std::function<void()> fn) {
  if (!fn) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) {
      if (!first_hook_) {
        first_hook_ = std::move(fn);
      } else {
        completion_hooks_.push_back(std::move(fn));
      }
      return;
    }
  }
  fn();
}

bool WorkState::has_completion_hooks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !done_ && first_hook_ != nullptr;
}

void WorkState::run_completion_hooks() {
  std::function<void()> first;
  std::vector<std::function<void()>> more;
  {
    std::lock_guard<std::mutex> lock(mu_);
    first.swap(first_hook_);
    more.swap(completion_hooks_);
  }
  // Outside the lock: a hook may look at this op.
  if (first) first();
  for (auto& hook : more) hook();
}

bool WorkState::is_completed() const { return done_.load(std::memory_order_acquire); }

bool WorkState::progress(Mover who, std::chrono::milliseconds timeout,
                         const std::shared_ptr<WorkState>& self) {
  (void)self;
  switch (who) {
    case Mover::kTester: return is_completed();
    case Mover::kNobody: return false;
    case Mover::kWaiter:
    case Mover::kHelper: break;
  }
  return await(deadline_after(timeout));
}

bool WorkState::await(std::chrono::steady_clock::time_point deadline) {
  // Most waits end within microseconds of being called: spin a little before sleeping.
  if (spin_then_yield([&] { return is_completed(); })) return true;
  // A thread with work of its own does it before sleeping (idle_work.h).
  while (run_idle_work()) {
    if (is_completed()) return true;
  }
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_until(lock, deadline, [&] { return done_.load(); });
}

std::string WorkState::expired_wait(std::chrono::milliseconds timeout) const {
  return str(description(), ": not completed within ", timeout.count(), " ms (Work::wait)");
}

void WorkState::rethrow_if_failed() const {
  if (!failed_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
}

}  // namespace detail

Work Work::completed(std::vector<Tensor> outputs, std::string description) {
  auto state = std::make_shared<detail::WorkState>(std::move(description));
  state->complete(std::move(outputs));
  return Work(std::move(state));
}

bool Work::is_completed() const {
  return !state_ || state_->progress(detail::Mover::kTester, {}, state_);
}

void Work::wait() {
  if (!state_) return;
  // A self-timed op needs its own deadline, and may queue behind one op that uses up its
  // deadline before failing (the ops behind it then fail at once): two deadlines bound that.
  if (state_->self_timed)
    wait_for(2 * default_timeout() + std::chrono::seconds(1), detail::Mover::kHelper);
  else
    wait_for(default_timeout(), detail::Mover::kWaiter);
}

void Work::wait(std::chrono::milliseconds timeout) { wait_for(timeout, detail::Mover::kWaiter); }

void Work::wait_for(std::chrono::milliseconds timeout, detail::Mover who) {
  if (!state_) return;
  // On expiry the op has been given up already (a collective's group poisoned: progress()).
  if (!state_->progress(who, timeout, state_))
    FERRY_THROW(TimeoutError, state_->expired_wait(timeout));
  state_->rethrow_if_failed();
}

const std::vector<Tensor>& Work::outputs() {
  static const std::vector<Tensor> kNone;
  if (!state_) return kNone;
  wait();
  return state_->outputs();
}

Tensor Work::output(size_t i) {
  const std::vector<Tensor>& outs = outputs();
  FERRY_CHECK(i < outs.size(), InvalidArgument, "Work::output: ", describe(), " produced ",
              outs.size(), " output(s), asked for index ", i);
  return outs[i];
}

void Work::progress_in_background(std::function<void()> on_completed) const {
  if (!state_) {
    if (on_completed) on_completed();
    return;
  }
  // The callback first: whoever completes the op runs it, and the hook can tell whether anyone
  // is owed a completion (an op nobody waits for must then still be moved).
  state_->on_completion(std::move(on_completed));
  if (!state_->progress(detail::Mover::kNobody, {}, state_)) detail::progress_in_background(state_);
}

Work Work::then(std::function<void(Work)> callback) const {
  FERRY_CHECK(callback != nullptr, InvalidArgument, "Work::then: expected a callback, given null");
  Work self = *this;
  progress_in_background([self, cb = std::move(callback)]() {
    try {
      cb(self);
    } catch (const std::exception& e) {
      // The thread running it is ferry's (a group's worker, the progress thread): an exception
      // escaping there would end the process.
      log_line(LogLevel::Warn, "coll",
               detail::str("Work::then: the callback of ", self.describe(), " threw: ", e.what()));
    } catch (...) {
      log_line(LogLevel::Warn, "coll",
               detail::str("Work::then: the callback of ", self.describe(), " threw a non-std exception"));
    }
  });
  return *this;
}

std::string Work::describe() const { return state_ ? state_->description() : "completed work"; }

void wait_all(std::vector<Work>& works) {
  // Each wait is bounded (a collective fails by itself at its deadline), and a plain wait()
  // keeps the op's own TimeoutError, which names the absent ranks.
  for (Work& w : works) w.wait();
}

}  // namespace ferry
