#include <ferry/runtime/idle_work.h>

#include <utility>

namespace ferry::detail {

namespace {
thread_local IdleWork idle_work;
thread_local const void* idle_work_owner = nullptr;
thread_local bool running_idle_work = false;
}  // namespace

void set_idle_work(IdleWork work, const void* owner) {
  idle_work = std::move(work);
  idle_work_owner = idle_work ? owner : nullptr;
}

bool idle_work_registered_by(const void* owner) {
  return idle_work && idle_work_owner == owner;
}

void clear_idle_work(const void* owner) {
  if (idle_work_owner != owner) return;
  idle_work = nullptr;
  idle_work_owner = nullptr;
}

bool run_idle_work() {
  if (!idle_work || running_idle_work) return false;
  running_idle_work = true;
  struct Reset {
    ~Reset() { running_idle_work = false; }
  } reset;
  try {
    return idle_work();
  } catch (...) {
    idle_work = nullptr;
    throw;
  }
}

}  // namespace ferry::detail
