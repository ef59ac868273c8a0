// Debug output by subsystem, NCCL style: FERRY_DEBUG=warn|info|trace, FERRY_DEBUG_SUBSYS=coll,ucx.
//
// Every line says when (UTC, microseconds), where (host:pid) and which rank it comes from, so the
// lines of several ranks can be merged and sorted:
//   [ferry 05:16:23.123456 host:4242 r1 INFO coll] all_reduce seq 7 algo ring
// "r-" before a rank is known. FERRY_DEBUG_FILE=PATH writes the lines to PATH instead of stderr;
// %h, %p and %r in PATH become the host name, the pid and the rank (one file per rank of a
// local-transport process too), e.g. FERRY_DEBUG_FILE=ferry.%h.%p.%r.log.
#pragma once

#include <ferry/runtime/error.h>

#include <string>

namespace ferry {

// Warn: something is likely wrong but the job goes on (a stalled collective, a fallback).
enum class LogLevel { Off = 0, Warn = 1, Info = 2, Trace = 3 };

bool log_enabled(LogLevel level, const char* subsys);
void log_line(LogLevel level, const char* subsys, const std::string& text);

namespace detail {
// The rank the log lines of this thread carry: run_ranks sets it in each rank's thread.
void set_thread_log_rank(int rank);
// The rank of every thread of this process that has none of its own: init() sets it when the
// process is one rank of a multi-process world.
void set_process_log_rank(int rank);
}  // namespace detail

}  // namespace ferry

// FERRY_LOG(Info, "coll", "all_reduce seq ", seq, " algo ring"): formats only when enabled.
#define FERRY_LOG(level, subsys, ...)                                          \
  do {                                                                         \
    if (::ferry::log_enabled(::ferry::LogLevel::level, subsys))                \
      ::ferry::log_line(::ferry::LogLevel::level, subsys, ::ferry::detail::str(__VA_ARGS__)); \
  } while (0)
