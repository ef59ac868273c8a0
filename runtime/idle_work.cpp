#include <ferry/runtime/idle_work.h>

#include <utility>

namespace ferry::detail {

namespace {
thread_local IdleWork idle_work;
thread_local bool running_idle_work = false;
}  // namespace

void set_idle_work(IdleWork work) { idle_work = std::move(work); }

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
