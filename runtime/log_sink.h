// What the log module shares inside the library (not installed): the path patterns of
// FERRY_DEBUG_FILE, which the timeline file reuses, the rank a thread logs as, and a hook that
// lets a test see the lines a run printed.
#pragma once

#include <ferry/runtime/log.h>

#include <functional>
#include <string>

namespace ferry::detail {

// `pattern` with %h, %p, %r, %% replaced by the host name, the pid, `rank` and '%'.
std::string expand_log_path(const std::string& pattern, const std::string& rank);

// The rank this thread's lines carry: the thread's own (run_ranks), else the process's, else -1.
int current_log_rank();

// Called with every line log_line prints (after it printed it, under the log's lock: it must
// not log). Null removes it. For tests that check what a run said.
using LogObserver = std::function<void(LogLevel level, const char* subsys, const std::string& text)>;
void set_log_observer(LogObserver observer);

}  // namespace ferry::detail
