#include <ferry/runtime/log.h>
#include <ferry/runtime/log_sink.h>

#include <ferry/runtime/config.h>
#include <ferry/runtime/version.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <unistd.h>

namespace ferry {
namespace {

thread_local int t_rank = -1;
std::atomic<int> g_process_rank{-1};

LogLevel configured_level() {
  static const LogLevel level = [] {
    const std::string& d = config().debug;
    if (d == "trace") return LogLevel::Trace;
    if (d == "info") return LogLevel::Info;
    if (d == "warn") return LogLevel::Warn;
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

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::Warn: return "WARN";
    case LogLevel::Info: return "INFO";
    case LogLevel::Trace: return "TRACE";
    default: return "";
  }
}

const std::string& host_name() {
  static const std::string name = [] {
    char buf[256] = {};
    if (gethostname(buf, sizeof buf - 1) != 0) return std::string("unknown-host");
    return std::string(buf);
  }();
  return name;
}

// One line at a time, even from rank threads of the local transport.
std::mutex& log_mutex() {
  static std::mutex mu;
  return mu;
}

detail::LogObserver& observer() {
  static detail::LogObserver o;  // guarded by log_mutex()
  return o;
}

// FERRY_DEBUG_FILE with %h, %p, %r expanded for `rank` ("-" when unknown).
std::string expand_path(const std::string& pattern, const std::string& rank) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      const char c = pattern[i + 1];
      if (c == 'h') { out.append(host_name()); ++i; continue; }
      if (c == 'p') { out.append(std::to_string(getpid())); ++i; continue; }
      if (c == 'r') { out.append(rank); ++i; continue; }
      if (c == '%') { out.push_back('%'); ++i; continue; }
    }
    out.push_back(pattern[i]);
  }
  return out;
}

// Where a line of `rank` goes: stderr, or its FERRY_DEBUG_FILE (opened once, line-buffered).
std::FILE* sink(const std::string& rank) {
  static const std::string pattern = config().debug_file;
  if (pattern.empty()) return stderr;
  static std::map<std::string, std::FILE*> files;  // by expanded path; kept open to exit
  const std::string path = expand_path(pattern, rank);
  auto it = files.find(path);
  if (it == files.end()) {
    std::FILE* f = std::fopen(path.c_str(), "a");
    if (f != nullptr) setvbuf(f, nullptr, _IOLBF, 0);
    else std::fprintf(stderr, "[ferry] FERRY_DEBUG_FILE: cannot open '%s'; logging to stderr\n",
                      path.c_str());
    it = files.emplace(path, f != nullptr ? f : stderr).first;
  }
  return it->second;
}

std::string timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
                          now.time_since_epoch()).count() % 1'000'000;
  std::tm utc{};
  gmtime_r(&secs, &utc);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02d:%02d:%02d.%06lld", utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<long long>(micros));
  return buf;
}

}  // namespace

bool log_enabled(LogLevel level, const char* subsys) {
  return level <= configured_level() && configured_level() != LogLevel::Off &&
         subsys_selected(subsys);
}

void log_line(LogLevel level, const char* subsys, const std::string& text) {
  const int r = detail::current_log_rank();
  const std::string rank = r >= 0 ? std::to_string(r) : "-";
  const std::string when = timestamp();
  std::lock_guard<std::mutex> lock(log_mutex());
  std::FILE* out = sink(rank);
  // The first line a process prints names the library's version, as NCCL's does: a log pasted
  // into a bug report then says which ferry produced it.
  static bool first = true;
  if (first) {
    first = false;
    std::fprintf(out, "[ferry %s %s:%d r%s INFO init] ferry version %s\n", when.c_str(),
                 host_name().c_str(), static_cast<int>(getpid()), rank.c_str(), version());
  }
  std::fprintf(out, "[ferry %s %s:%d r%s %s %s] %s\n", when.c_str(), host_name().c_str(),
               static_cast<int>(getpid()), rank.c_str(), level_name(level), subsys, text.c_str());
  if (observer()) observer()(level, subsys, text);
}

namespace detail {

void set_thread_log_rank(int rank) { t_rank = rank; }

void set_process_log_rank(int rank) { g_process_rank.store(rank, std::memory_order_relaxed); }

std::string expand_log_path(const std::string& pattern, const std::string& rank) {
  return expand_path(pattern, rank);
}

int current_log_rank() {
  return t_rank >= 0 ? t_rank : g_process_rank.load(std::memory_order_relaxed);
}

void set_log_observer(LogObserver o) {
  std::lock_guard<std::mutex> lock(log_mutex());
  observer() = std::move(o);
}

}  // namespace detail
}  // namespace ferry
