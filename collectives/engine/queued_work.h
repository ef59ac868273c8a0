// The Work of a collective, and what it does to its group when a user's wait on it expires
// (internal).
#pragma once

#include <ferry/collectives/engine/op_description.h>
#include <ferry/collectives/group.h>
#include <ferry/runtime/work.h>

#include <string>

namespace ferry::detail {

class GroupImpl;

// A Work that a user gave up waiting for leaves the ranks out of step: the group is poisoned
// with a TimeoutError quoting `why`.
void poison_after_wait_timeout(GroupImpl& group, const std::string& why);

// The Work of an op queued on its group's executor (issue.h); the other kind, an op started at
// issue, is in_flight_work.h's. What describes it, lets a waiter run it and poisons the group
// after a user's wait expired lives here rather than in std::functions of WorkState, each of
// which would cost an allocation per op.
class QueuedWork final : public WorkState {
 public:
  explicit QueuedWork(OpDescription op) : WorkState(std::string()), op_(std::move(op)) {
    self_timed = true;
  }

  std::string description() const override { return op_.format(); }
  // The group's worker runs every queued op (a waiter may take one first), dropped ones too.
  bool hand_off_progress(const std::shared_ptr<WorkState>&) override { return true; }
  // With `may_help`, runs the group's oldest queued ops on the waiting thread first
  // (Executor::run_one_here) while this op is not complete.
  bool wait_until(Clock::time_point deadline, bool may_help) override;
  void wait_timed_out(const std::string& why) override;

 private:
  OpDescription op_;  // formatted only when a message needs it
};

}  // namespace ferry::detail
