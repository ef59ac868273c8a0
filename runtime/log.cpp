#include <ferry/runtime/log.h>

#include <ferry/runtime/config.h>
#include <ferry/runtime/version.h>

#include <cstdio>
#include <mutex>
#include <sstream>
#include <string>
#include <unistd.h>

namespace ferry {
namespace {

LogLevel configured_level() {
  static const LogLevel level = [] {
    const std::string& d = config().debug;
    if (d == "trace") return LogLevel::Trace;
    if (d == "info") return LogLevel::Info;
    return LogLevel::Off;
  }();
  return level;
}

bool subsys_selected(const char* subsys) {
  const std::string& list = config().debug_subsys;
  if (list.empty()) return true;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ','))
    if (item == subsys || item == "all") return true;
  return false;
}

}  // namespace

bool log_enabled(LogLevel level, const char* subsys) {
  return level <= configured_level() && configured_level() != LogLevel::Off &&
         subsys_selected(subsys);
}

void log_line(LogLevel level, const char* subsys, const std::string& text) {
  static std::mutex mu;  // one line at a time, even from rank threads of the local transport
  std::lock_guard<std::mutex> lock(mu);
  // The first line a process prints names the library's version, as NCCL's does: a log pasted
  // into a bug report then says which ferry produced it.
  static bool first = true;
  if (first) {
    first = false;
    std::fprintf(stderr, "[ferry %d INFO init] ferry version %s\n", static_cast<int>(getpid()),
                 version());
  }
  std::fprintf(stderr, "[ferry %d %s %s] %s\n", static_cast<int>(getpid()),
               level == LogLevel::Trace ? "TRACE" : "INFO", subsys, text.c_str());
}

}  // namespace ferry
