// The Work of a collective, and what it does to its group when a user's wait on it expires
// (internal).
#pragma once

#include <ferry/collectives/engine/fingerprint.h>
#include <ferry/collectives/engine/op_body.h>
#include <ferry/collectives/engine/op_description.h>
#include <ferry/collectives/group.h>
#include <ferry/runtime/work.h>

#include <memory>
#include <string>

namespace ferry::detail {

class GroupImpl;

// A Work that a user gave up waiting for leaves the ranks out of step: the group is poisoned
// with a TimeoutError quoting `why`.
void poison_after_wait_timeout(GroupImpl& group, const std::string& why);

// The Work of an op queued on its group's executor (issue.h); the other kind, an op started at
// issue, is in_flight_work.h's. What describes it, lets a waiter run it and poisons the group
// after a user's wait expired lives here (its description and progress) rather than in
// std::functions of WorkState, each of which would cost an allocation per op.
//
// It also holds what the worker runs (the op's body, kept inline: op_body.h), so that queueing
// an op allocates nothing beyond the Work, which the issuing thread's pool recycles.
class QueuedWork final : public WorkState {
 public:
  QueuedWork(OpDescription op, GroupImpl& group, const Fingerprint& fingerprint, bool checked,
             OpBody body)
      : WorkState(std::string()), op_(std::move(op)), group_(&group), fingerprint_(fingerprint),
        checked_(checked), body_(std::move(body)) {
    self_timed = true;
  }

  // Queues the op on its group's worker, which then holds a reference to `work` until it ran.
  static void enqueue(const std::shared_ptr<QueuedWork>& work);
  // Runs the op on the calling thread at once if its group's worker has nothing queued or
  // running (Executor::run_here_if_idle), and says whether it did; otherwise nothing happens.
  static bool run_here_if_idle(const std::shared_ptr<QueuedWork>& work);

  std::string description() const override { return op_.format(); }
  // The group's worker runs every queued op, dropped ones too: nothing to hand off (kNobody),
  // and a test only reads the flag. A helper (kHelper) runs the group's oldest queued ops on
  // its own thread first (Executor::run_one_here) while this op is not complete. A wait that
  // expires poisons the group.
  bool progress(Mover who, std::chrono::milliseconds timeout,
                const std::shared_ptr<WorkState>& self) override;

 private:
  // Runs the body on the worker or a helping waiter, completes or fails the Work, and drops the
  // queue's reference.
  void run();

  OpDescription op_;  // formatted only when a message needs it
  GroupImpl* group_;  // the op's group, alive while it has queued ops (its worker runs them)
  Fingerprint fingerprint_;
  bool checked_;  // FERRY_CHECK=1: compare fingerprints with the peers before starting
  OpBody body_;   // emptied before the op completes (see run)
  std::shared_ptr<QueuedWork> queued_;  // the queue's reference, until run
};

}  // namespace ferry::detail
