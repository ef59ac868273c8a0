// Work a thread does in the time it would otherwise spend polling for a message (internal).
//
// When a host's ranks fill its cores, a helper thread of a rank (a data loader) can only run by
// taking the core from its rank's own thread, at moments the scheduler picks: often in the
// middle of a computation that the peers then wait for. A thread that waits for a message
// already has the core and nothing to do with it. So a thread may register bounded pieces of
// work (a few samples of the next batch, tens of microseconds each), and ferry's polling waits
// run one piece between two looks at the message instead of spinning: the work is done where
// the thread would have idled, and the wait's end is noticed at most one piece late.
//
// The hook is per thread: only waits on the thread that registered it run it.
#pragma once

#include <functional>

namespace ferry::detail {

// One bounded piece of work; returns false when there is nothing to do now.
using IdleWork = std::function<bool()>;

// Registers this thread's idle work for `owner` (replacing any); an empty function removes it.
void set_idle_work(IdleWork work, const void* owner = nullptr);
// Whether this thread's idle work is the one `owner` registered.
bool idle_work_registered_by(const void* owner);
// Removes this thread's idle work if `owner` registered it (an owner going away must not remove
// the work another one registered since).
void clear_idle_work(const void* owner);

// Runs one piece of this thread's idle work; false when it has none, has nothing to do now, or
// is already running one (a piece never runs inside another). An exception a piece throws
// removes the hook and is passed on: the work's owner should catch its own.
bool run_idle_work();

}  // namespace ferry::detail
