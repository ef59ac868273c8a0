// Debug output by subsystem, NCCL style: FERRY_DEBUG=info|trace, FERRY_DEBUG_SUBSYS=coll,transport.
#pragma once

#include <ferry/runtime/error.h>

#include <string>

namespace ferry {

enum class LogLevel { Off = 0, Info = 1, Trace = 2 };

bool log_enabled(LogLevel level, const char* subsys);
void log_line(LogLevel level, const char* subsys, const std::string& text);

}  // namespace ferry

// FERRY_LOG(Info, "coll", "all_reduce seq ", seq, " algo ring"): formats only when enabled.
#define FERRY_LOG(level, subsys, ...)                                          \
  do {                                                                         \
    if (::ferry::log_enabled(::ferry::LogLevel::level, subsys))                \
      ::ferry::log_line(::ferry::LogLevel::level, subsys, ::ferry::detail::str(__VA_ARGS__)); \
  } while (0)
