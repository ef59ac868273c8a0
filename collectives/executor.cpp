#include "collectives/executor.h"

#include "runtime/wait_policy.h"

namespace ferry::detail {

Executor::~Executor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Executor::enqueue(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }
  cv_.notify_one();
}

void Executor::loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (tasks_.empty()) {
        // A trainer often issues the next op right away: look briefly before sleeping.
        lock.unlock();
        spin_then_yield([&] {
          std::lock_guard<std::mutex> peek(mu_);
          return !tasks_.empty() || stopping_;
        });
        lock.lock();
      }
      cv_.wait(lock, [&] { return !tasks_.empty() || stopping_; });
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();  // tasks catch their own errors and report them through their Work
  }
}

}  // namespace ferry::detail
