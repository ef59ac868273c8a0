// Work: the handle of an asynchronous operation.
//
// Every collective returns a Work at once; the data moves in the background. wait() blocks until
// the op finished and rethrows its error, if any; every wait has a deadline (the default one is
// FERRY_TIMEOUT). A wait that expires throws TimeoutError and poisons the op's group: MPI-style
// collectives cannot be cancelled half-way, so the group cannot be trusted afterwards.
#pragma once

#include <ferry/runtime/tensor.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ferry {

namespace detail {

// Who asks an op to move, through its Work (WorkState::progress).
enum class Mover : uint8_t {
  kTester,  // one look that never blocks (Work::is_completed, the progress thread's rounds)
  kWaiter,  // a caller's wait (Work::wait(timeout), or wait() on an op without a deadline of
            // its own): the op is not run on the waiting thread
  kHelper,  // a wait at least as long as the op's own deadline (Work::wait() on a self-timed
            // op): the waiting thread may run the op itself (an op queued on its group's worker
            // runs on the waiter when it comes first), since a running op cannot be left early
  kNobody,  // nobody waits for it (Work::progress_in_background)
};

// Shared between the Work handles a user holds and whoever completes the op.
//
// A kind of op says how it moves in one hook, progress(), and whether it keeps a deadline of
// its own in one flag, self_timed. The plain state (an op that another thread completes, or one
// complete at birth) moves by itself: a test reads the flag, a wait blocks for it.
class WorkState {
 public:
  explicit WorkState(std::string description) : description_(std::move(description)) {}
  // The description is put together only when something asks for it (an error, a trace line):
  // formatting it for every op would cost more than a small collective.
  explicit WorkState(std::function<std::string()> describe) : describe_(std::move(describe)) {}
  virtual ~WorkState() = default;

  // Virtual so that a state which keeps what describes it anyway (a native collective's Work)
  // need not wrap it in a std::function, which would cost an allocation per op.
  virtual std::string description() const { return describe_ ? describe_() : description_; }

  // Completion, called once by whoever runs the op.
  void complete(std::vector<Tensor> outputs = {});
  void fail(std::exception_ptr error);

  // The one hook: moves the op as `who` asks, and says whether the asker is done with it.
  //   kTester: true once the op completed (succeeded or failed). Never blocks.
  //   kWaiter, kHelper: blocks until the op completed (true) or `timeout` passed (false). On
  //     expiry the op has been given up as its kind requires before this returns: a collective
  //     poisons its group (MPI-style collectives cannot be cancelled half-way, so the ranks are
  //     out of step), a send or a recv is withdrawn too. Rethrows nothing.
  //   kNobody: true when the op completes without a thread of ferry's testing it, because
  //     whoever runs it completes it anyway (an op queued on its group's worker) or because it
  //     was handed to one who can (a collective started at issue: its group's worker waits it
  //     out); `self` is this state's own handle, for the task that drives it. False: the
  //     process's progress thread tests it (runtime/progress.h).
  // Here: nothing to move; a test reads the flag, a wait blocks, nothing is handed off.
  virtual bool progress(Mover who, std::chrono::milliseconds timeout,
                        const std::shared_ptr<WorkState>& self);

  // Whether the op completed, without moving it (a read of the flag).
  bool is_completed() const;
  // Calls `fn` once the op completed or failed: from complete() / fail(), on the thread that
  // completes it, or at once on the calling thread when it already has.
  void on_completion(std::function<void()> fn);
  // Whether a hook added by on_completion still waits for the op to complete.
  bool has_completion_hooks() const;
  // After completion: rethrows the op's error, if any.
  void rethrow_if_failed() const;
  const std::vector<Tensor>& outputs() const { return outputs_; }
  // What a wait of `timeout` that expired says (the TimeoutError's message, the reason a
  // collective's group is poisoned with).
  std::string expired_wait(std::chrono::milliseconds timeout) const;

  // True when the op enforces its own deadline (collectives: FERRY_TIMEOUT from the moment it
  // starts, failing with a TimeoutError that names the silent peers). Work::wait() then waits
  // for that error rather than racing it with a deadline of its own, as a helper (kHelper).
  bool self_timed = false;

 protected:
  // Blocks until completed or `deadline`; returns false on expiry. Spins briefly, does the
  // calling thread's idle work (idle_work.h), then sleeps: for an op another thread completes.
  bool await(std::chrono::steady_clock::time_point deadline);
  // complete() and fail() without the completion hooks, which the caller runs with
  // run_completion_hooks() once it let go of its own locks: a hook may test or wait for this
  // same op (a Work::then callback), which takes them again. Waiters are woken at once.
  // Return whether hooks were added before completion (then run_completion_hooks is due).
  bool mark_completed(std::vector<Tensor> outputs);
  bool mark_failed(std::exception_ptr error);
  // Runs (once) the hooks added before completion; nothing when none are due.
  void run_completion_hooks();

  std::string description_;
  std::function<std::string()> describe_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Written under mu_ (a waiter's predicate reads it there), read without it by is_completed:
  // a test of a finished op then takes no lock.
  std::atomic<bool> done_{false};
  // Set under mu_ once error_ is, never cleared: rethrow_if_failed of an op that succeeded takes
  // no lock.
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
  std::vector<Tensor> outputs_;
  // The hooks in the order given: nearly every op has one at most, which is held inline (a
  // list cost an allocation per op); any more go to the list.
  std::function<void()> first_hook_;
  std::vector<std::function<void()>> completion_hooks_;
};

}  // namespace detail

class Work {
 public:
  Work() = default;  // an already-completed, empty Work
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}

  // A Work that is complete at birth with these outputs (ops that need no communication).
  static Work completed(std::vector<Tensor> outputs = {}, std::string description = "");

  bool is_completed() const;
  // Waits for the op to finish and rethrows its error. A collective fails by itself with
  // TimeoutError once it ran FERRY_TIMEOUT (set_default_timeout) without finishing, so this
  // returns or throws within a bounded time; for send/recv it waits FERRY_TIMEOUT.
  void wait();
  // Waits at most `timeout`; throws TimeoutError naming the op on expiry.
  void wait(std::chrono::milliseconds timeout);
  // Tensors the op allocated (the gathered tensor and sizes of all_gather_v with exchanged
  // sizes); empty for ops that write into tensors the caller passed, which the caller already
  // holds (the runtime keeps no handle to them once the op completed). Waits first.
  const std::vector<Tensor>& outputs();
  Tensor output(size_t i = 0);
  std::string describe() const;

  // For an op launched now and waited for much later: keeps it moving while nobody waits for
  // it, and calls `on_completed` (may be null) once it succeeded or failed. An op that its
  // group's worker runs anyway, or that can be handed to it (an MPI collective started at
  // issue), needs no other thread: `on_completed` runs on whoever completes it. Any other op is
  // tested by one process-wide thread until it completed (runtime/progress.h), which then calls
  // `on_completed`. An empty Work is complete: `on_completed` runs at once on the calling thread.
  void progress_in_background(std::function<void()> on_completed = nullptr) const;

  // Completion callback (a future's then): `callback(work)` runs once the op succeeded or
  // failed, with a handle to this op; its work.wait() returns at once, or rethrows the op's
  // error. Runs on the thread that completes the op: the group's worker thread for the
  // collectives (MPI's own collectives started at issue included: they are handed to it),
  // ferry's process-wide progress thread for ops that must be tested to move (send, recv), or
  // the calling thread, before then() returns, when the op is complete already; in every case
  // after that thread let go of the op's own locks, so it may test or wait for this Work. It
  // must be short and must not wait for another op of the same group (the worker that would
  // run it is the one running the callback). A wait() on the op may return before its callbacks ran. An
  // exception it throws is caught and logged (WARN), not propagated. Several callbacks may be
  // added; each runs once. Returns *this, for chaining.
  Work then(std::function<void(Work)> callback) const;

 private:
  void wait_for(std::chrono::milliseconds timeout, detail::Mover who);
  std::shared_ptr<detail::WorkState> state_;
};

// Waits for every Work in order, each as Work::wait() does.
void wait_all(std::vector<Work>& works);

}  // namespace ferry
