// A single worker thread that runs a group's operations one after another, in issue order.
//
// Collectives on one group must run in the same order on every rank; one FIFO worker per group
// keeps that order while the caller goes on (Work is the handle). Different groups have
// different workers, so they progress independently.
#pragma once

#include <ferry/collectives/engine/task_queue.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
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
  // A task keeps what it captures inline up to Task::kInlineBytes (task.h): no allocation.
  void enqueue(Task task);

  // Runs the oldest queued task on the calling thread, unless a task is running already or none
  // is queued (then returns false). A caller about to block in Work::wait helps this way: the
  // op runs without the two thread hand-offs (~20 us each here) of waking the worker.
  bool run_one_here();

  // Runs `task` on the calling thread at once, as if it had been queued and taken at once,
  // when nothing is queued or running (returns true); otherwise does nothing (returns false).
  // For a group of one rank, whose ops wait for nobody: no hand-off to the worker.
  bool run_here_if_idle(Task task);
  // Nothing queued and nothing running.
  bool idle();

  // Returns once every task queued so far has run: runs them on the calling thread, or waits
  // (sleeping in 1 ms slices) for the one another thread runs. Every op has a deadline, so this
  // ends. For finalize, which must leave nothing for the transport's end.
  void drain();

  // Caller-first mode, for native (MPI) collectives, which progress only inside MPI calls
  // anyway. Handing an op to the worker costs two thread wake-ups (~10 us at 8 B, more when
  // ranks outnumber cores), so in this mode ops in a busy stretch do not wake the worker: it
  // leaves a task queued for `grace` so that a caller that waits runs it itself (run_one_here),
  // and otherwise finds it by polling, backing off from `grace` to kMaxPoll; after that much
  // idleness it sleeps until the next enqueue wakes it. A collective nobody waits for therefore
  // starts within kMaxPoll. Zero (the default): the worker is woken at every enqueue and takes
  // tasks at once.
  void set_caller_first(std::chrono::microseconds grace) { grace_ = grace; }
  static constexpr std::chrono::microseconds kMaxPoll{5000};

 private:
  void loop();
  void caller_first_loop();
  void run(Task& task);
  void finished_one();

  std::mutex mu_;
  std::condition_variable cv_;
  TaskQueue tasks_;
  std::chrono::microseconds grace_{0};
  bool stopping_ = false;
  bool sleeping_ = false;  // caller-first mode: the worker waits for an enqueue to wake it
  // Tasks queued or running. Read without the lock by idle(), which every issue asks
  // (issue.h): taking the mutex there cost a small collective measurably.
  std::atomic<int> unfinished_{0};
  bool running_ = false;  // one task at a time, whichever thread runs it: order is the contract
  std::thread thread_;
};

}  // namespace ferry::detail
