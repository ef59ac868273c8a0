#include <ferry/collectives/engine/queued_work.h>

#include <ferry/collectives/engine/group_impl.h>
#include <ferry/runtime/error.h>

namespace ferry::detail {

void poison_after_wait_timeout(GroupImpl& group, const std::string& why) {
  group.poison(std::make_exception_ptr(TimeoutError("ferry: " + why)), why);
}

bool QueuedWork::wait_until(Clock::time_point deadline, bool may_help) {
  if (may_help) {
    while (!WorkState::is_completed()) {
      auto g = op_.group.lock();  // weak: a Work may outlive its group (and its worker)
      if (!g || !g->executor().run_one_here()) break;
    }
  }
  return WorkState::wait_until(deadline, may_help);
}

void QueuedWork::wait_timed_out(const std::string& why) {
  if (auto g = op_.group.lock()) poison_after_wait_timeout(*g, why);
}

}  // namespace ferry::detail
