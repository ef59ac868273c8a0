// FERRY_TIMELINE=path: every collective's start and end on every rank as a Chrome trace (the
// JSON array format chrome://tracing and Perfetto open), Horovod's timeline for ferry.
//
// One file per process: the ranks of a local-transport process share it (one trace "process"
// per rank), and under mpiexec the path's %r (or %p) gives each rank its own; the times are
// the wall clock in microseconds, so the files of one host line up when merged
// (`jq -s add a.json b.json`). Events are appended as the ops end; the array is closed when the
// process exits normally (a trace viewer opens an unterminated one as well).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ferry::detail {

// Whether FERRY_TIMELINE is set (read once).
bool timeline_on();

// One op on one rank: `name` (the op), from `begin` to `end` (wall clock). `rank` is the
// world rank (the trace's process), `group` the group id (its thread); `args` is a JSON object
// body ("\"seq\": 3") shown when the event is selected.
void timeline_event(const std::string& name, int rank, uint64_t group,
                    std::chrono::system_clock::time_point begin,
                    std::chrono::system_clock::time_point end, const std::string& args);

}  // namespace ferry::detail
