#include <ferry/collectives/engine/executor.h>

#include <ferry/runtime/wait_policy.h>

namespace ferry::detail {

Executor::~Executor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Executor::enqueue(Task task) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push(std::move(task), std::chrono::steady_clock::now());
    unfinished_.fetch_add(1, std::memory_order_relaxed);
    if (!thread_.joinable()) {
      thread_ = std::thread([this] { grace_.count() > 0 ? caller_first_loop() : loop(); });
    }
    wake = grace_.count() == 0 || sleeping_;
  }
  if (wake) cv_.notify_one();
}

bool Executor::run_one_here() {
  Task task;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (running_ || tasks_.empty()) return false;
    task = tasks_.pop();
    running_ = true;
  }
  run(task);
  return true;
}

bool Executor::run_here_if_idle(Task task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (running_ || !tasks_.empty()) return false;
    running_ = true;
    unfinished_.fetch_add(1, std::memory_order_relaxed);
  }
  run(task);
  return true;
}

bool Executor::idle() { return unfinished_.load(std::memory_order_acquire) == 0; }

void Executor::drain() {
  while (!idle()) {
    if (run_one_here()) continue;
    // Another thread runs a task; finished_one does not notify in caller-first mode, so look
    // again after a short sleep.
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(1), [&] {
      return unfinished_.load(std::memory_order_acquire) == 0 || (!running_ && !tasks_.empty());
    });
  }
}

void Executor::run(Task& task) {
  // Tasks report their errors through their Work; should one escape anyway, the queue must not
  // stay blocked behind a `running_` that is never reset.
  struct Done {
    Executor* self;
    ~Done() { self->finished_one(); }
  } done{this};
  task();
}

void Executor::finished_one() {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
    unfinished_.fetch_sub(1, std::memory_order_release);
    wake = grace_.count() == 0 || stopping_;  // a polling worker finds out by itself
  }
  if (wake) cv_.notify_all();
}

void Executor::loop() {
  auto runnable = [&] { return (!tasks_.empty() && !running_) || (stopping_ && tasks_.empty()); };
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!runnable()) {
        // A trainer often issues the next op right away: look briefly before sleeping.
        lock.unlock();
        spin_then_yield([&] {
          std::lock_guard<std::mutex> peek(mu_);
          return runnable();
        });
        lock.lock();
      }
      cv_.wait(lock, runnable);
      if (tasks_.empty()) {  // stopping and drained; a helping thread may still run the last one
        cv_.wait(lock, [&] { return !running_; });
        return;
      }
      task = tasks_.pop();
      running_ = true;
    }
    run(task);
  }
}

void Executor::caller_first_loop() {
  auto interval = grace_;
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stopping_ && tasks_.empty()) {
        cv_.wait(lock, [&] { return !running_; });
        return;
      }
      if (tasks_.empty() && interval >= kMaxPoll) {
        sleeping_ = true;  // idle for a while: the next enqueue wakes us
        cv_.wait(lock, [&] { return !tasks_.empty() || stopping_; });
        sleeping_ = false;
        interval = grace_;
        continue;
      }
      if (tasks_.empty() || running_) {
        // Nothing to take, or a caller is running one: look again later, less and less often.
        cv_.wait_for(lock, interval);
        interval = std::min(2 * interval, kMaxPoll);
        continue;
      }
      const auto due = tasks_.front_queued_at() + grace_;
      if (!stopping_ && std::chrono::steady_clock::now() < due) {
        cv_.wait_until(lock, due);  // a waiting caller may take it meanwhile
        continue;
      }
      interval = grace_;
      task = tasks_.pop();
      running_ = true;
    }
    run(task);
  }
}

}  // namespace ferry::detail
