// A single worker thread that runs a group's operations one after another, in issue order.
//
// Collectives on one group must run in the same order on every rank; one FIFO worker per group
// keeps that order while the caller goes on (Work is the handle). Different groups have
// different workers, so they progress independently.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace ferry::detail {

class Executor {
 public:
  Executor() = default;
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  // Runs what is still queued (every op has a deadline), then stops the thread.
  ~Executor();

  // The thread starts at the first task, so groups that never run a collective cost nothing.
  void enqueue(std::function<void()> task);

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ferry::detail
