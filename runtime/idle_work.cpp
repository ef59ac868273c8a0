#include <ferry/runtime/idle_work.h>

#include <utility>

namespace ferry::detail {

namespace {

// This thread's registration. Whether it is alive is a separate, trivially destructible
// thread_local: finalize() runs from an exit handler after glibc destroyed the main thread's
// thread_locals, and its waits ask for idle work; once the registration is gone they find none
// (a destroyed std::function would still look set, and be called).
enum class Life : unsigned char { kNotYet, kAlive, kGone };
thread_local Life life = Life::kNotYet;

struct Registration {
  Registration() { life = Life::kAlive; }
  ~Registration() { life = Life::kGone; }
  IdleWork work;
  const void* owner = nullptr;
};

// This thread's registration, made on first use; null once the thread's exit destroyed it.
Registration* registration() {
  if (life == Life::kGone) return nullptr;
  thread_local Registration r;
  return &r;
}

thread_local bool running_idle_work = false;

}  // namespace

void set_idle_work(IdleWork work, const void* owner) {
  Registration* r = registration();
  if (r == nullptr) return;  // the thread is ending: nothing will wait on it
  r->work = std::move(work);
  r->owner = r->work ? owner : nullptr;
}

bool idle_work_registered_by(const void* owner) {
  const Registration* r = life == Life::kAlive ? registration() : nullptr;
  return r != nullptr && r->work && r->owner == owner;
}

void clear_idle_work(const void* owner) {
  Registration* r = life == Life::kAlive ? registration() : nullptr;
  if (r == nullptr || r->owner != owner) return;
  r->work = nullptr;
  r->owner = nullptr;
}

bool run_idle_work() {
  // The waits' hot path: a thread that never registered work looks at one byte.
  if (life != Life::kAlive || running_idle_work) return false;
  Registration& r = *registration();
  if (!r.work) return false;
  running_idle_work = true;
  struct Reset {
    ~Reset() { running_idle_work = false; }
  } reset;
  try {
    return r.work();
  } catch (...) {
    r.work = nullptr;
    throw;
  }
}

}  // namespace ferry::detail
