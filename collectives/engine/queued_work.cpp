#include <ferry/collectives/engine/queued_work.h>

#include <ferry/collectives/engine/group_impl.h>
#include <ferry/runtime/error.h>

namespace ferry::detail {

void poison_after_wait_timeout(GroupImpl& group, const std::string& why) {
  group.poison(std::make_exception_ptr(TimeoutError("ferry: " + why)), why);
}

std::function<void(const std::string&)> poison_on_wait_timeout(const Group& group) {
  // Weak, so that a Work outliving its group does not keep it (and its worker) alive.
  return [weak = group.weak_impl()](const std::string& why) {
    if (auto g = weak.lock()) poison_after_wait_timeout(*g, why);
  };
}

bool QueuedWork::help_one() {
  auto g = op_.group.lock();  // weak: a Work may outlive its group (and its worker)
  return g && g->executor().run_one_here();
}

void QueuedWork::wait_timed_out(const std::string& why) {
  if (auto g = op_.group.lock()) poison_after_wait_timeout(*g, why);
}

}  // namespace ferry::detail
