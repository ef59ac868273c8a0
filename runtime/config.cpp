#include <ferry/runtime/config.h>

#include <ferry/runtime/error.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace ferry {
namespace {

Config read_environment() {
  Config c = detail::read_config([](const char* name) -> const char* {
    const char* v = std::getenv(name);
    return (v != nullptr && *v != '\0') ? v : nullptr;
  });
  for (const auto& [name, nearest] : detail::unknown_settings(environ))
    std::fprintf(stderr, "ferry: warning: %s is not a ferry setting (did you mean %s?)\n",
                 name.c_str(), nearest.c_str());
  return c;
}

std::atomic<int64_t>& timeout_override_ms() {
  static std::atomic<int64_t> ms{0};  // 0: use the configured value
  return ms;
}

std::atomic<int64_t>& stall_override_ms() {
  static std::atomic<int64_t> ms{INT64_MIN};  // INT64_MIN: use the configured value
  return ms;
}

std::atomic<int>& check_override() {
  static std::atomic<int> v{-1};  // -1: use the configured value
  return v;
}

}  // namespace

const Config& config() {
  static const Config c = read_environment();
  return c;
}

void set_default_timeout(std::chrono::milliseconds timeout) {
  FERRY_CHECK(timeout >= kMinTimeout && timeout <= kMaxTimeout, InvalidArgument,
              "set_default_timeout: expected a timeout from ", kMinTimeout.count(), " to ",
              kMaxTimeout.count(), " ms, given ", timeout.count(), " ms");
  timeout_override_ms().store(timeout.count());
}

std::chrono::milliseconds default_timeout() {
  int64_t ms = timeout_override_ms().load();
  return ms > 0 ? std::chrono::milliseconds(ms) : config().timeout;
}

std::chrono::milliseconds stall_warning_after(std::chrono::milliseconds span) {
  const int64_t o = stall_override_ms().load(std::memory_order_relaxed);
  const std::chrono::milliseconds set = o == INT64_MIN ? config().stall_warn
                                                       : std::chrono::milliseconds(o);
  if (set.count() == 0) return set;
  if (set.count() > 0) return set;
  // Horovod's stall inspector speaks after 60 s; a short deadline gets a quarter of itself, so
  // the warning comes well before the TimeoutError does.
  return std::max(std::chrono::milliseconds(1),
                  std::min<std::chrono::milliseconds>(std::chrono::seconds(60), span / 4));
}

void set_stall_warning(std::chrono::milliseconds after) {
  stall_override_ms().store(after.count() < 0 ? -1 : after.count());
}

bool check_mode() {
  const int v = check_override().load(std::memory_order_relaxed);
  return v < 0 ? config().check : v == 1;
}

void set_check_mode(bool on) { check_override().store(on ? 1 : 0); }

}  // namespace ferry
