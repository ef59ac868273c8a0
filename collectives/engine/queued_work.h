// The Work of a collective, and what it does to its group when a user's wait on it expires
// (internal).
#pragma once

#include <ferry/collectives/engine/op_description.h>
#include <ferry/collectives/group.h>
#include <ferry/runtime/work.h>

#include <functional>
#include <string>

namespace ferry::detail {

class GroupImpl;

// A Work that a user gave up waiting for leaves the ranks out of step: the group is poisoned
// with a TimeoutError quoting `why`.
void poison_after_wait_timeout(GroupImpl& group, const std::string& why);
// The same as a WorkState::on_wait_timeout. It holds the group weakly, so that a Work outliving
// its group does not keep it (and its worker) alive.
std::function<void(const std::string&)> poison_on_wait_timeout(const Group& group);

// The Work of an op queued on its group's executor (submit.h). What describes it, lets a waiter
// run it and poisons the group after a user's wait expired lives here rather than in
// std::functions of WorkState, each of which would cost an allocation per op.
class QueuedWork final : public WorkState {
 public:
  explicit QueuedWork(OpDescription op) : WorkState(std::string()), op_(std::move(op)) {}

  std::string description() const override { return op_.format(); }
  // The group's worker runs every queued op (a waiter may take one first), dropped ones too.
  bool completes_by_itself() const override { return true; }
  // Runs the group's oldest queued op on the waiting thread (Executor::run_one_here).
  bool help_one() override;
  void wait_timed_out(const std::string& why) override;

 private:
  OpDescription op_;  // formatted only when a message needs it
};

}  // namespace ferry::detail
