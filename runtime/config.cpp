#include "runtime/config.h"

#include "runtime/error.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string>

namespace ferry {
namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? std::string(v) : std::string(fallback);
}

Config read_config() {
  Config c;
  const std::string timeout = env_or("FERRY_TIMEOUT", "");
  if (!timeout.empty()) c.timeout = detail::parse_timeout("FERRY_TIMEOUT", timeout);
  c.backend = env_or("FERRY_BACKEND", "");
  c.algo = env_or("FERRY_ALGO", "");
  c.debug = env_or("FERRY_DEBUG", "off");
  c.debug_subsys = env_or("FERRY_DEBUG_SUBSYS", "");
  const std::string progress = env_or("FERRY_PROGRESS_THREAD", "1");
  FERRY_CHECK(progress == "0" || progress == "1", InvalidArgument,
              "FERRY_PROGRESS_THREAD: expected 0 or 1, given '", progress, "'");
  c.progress_thread = progress == "1";
  const std::string check = env_or("FERRY_CHECK", "0");
  FERRY_CHECK(check == "0" || check == "1", InvalidArgument,
              "FERRY_CHECK: expected 0 or 1, given '", check, "'");
  c.check = check == "1";
  return c;
}

std::atomic<int64_t>& timeout_override_ms() {
  static std::atomic<int64_t> ms{0};  // 0: use the configured value
  return ms;
}

std::atomic<int>& check_override() {
  static std::atomic<int> v{-1};  // -1: use the configured value
  return v;
}

}  // namespace

namespace detail {

std::chrono::milliseconds parse_timeout(const char* variable, const std::string& text) {
  char* end = nullptr;
  const double seconds = std::strtod(text.c_str(), &end);
  // Checked before any conversion: a double outside int64's range (inf, 1e300) converts with
  // undefined behaviour, and one that fits could still overflow the clock when added to now.
  // Below a millisecond would round to no deadline at all.
  FERRY_CHECK(end != text.c_str() && *end == '\0' && std::isfinite(seconds) &&
                  seconds * 1000.0 >= static_cast<double>(kMinTimeout.count()) - 0.5 &&
                  seconds * 1000.0 <= static_cast<double>(kMaxTimeout.count()),
              InvalidArgument, variable, ": expected a number of seconds from ",
              kMinTimeout.count() / 1000.0, " to ", kMaxTimeout.count() / 1000, ", given '", text,
              "'");
  return std::max(kMinTimeout, std::chrono::milliseconds(std::llround(seconds * 1000.0)));
}

}  // namespace detail

const Config& config() {
  static const Config c = read_config();
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

}  // namespace ferry

namespace ferry {

bool check_mode() {
  const int v = check_override().load(std::memory_order_relaxed);
  return v < 0 ? config().check : v == 1;
}

void set_check_mode(bool on) { check_override().store(on ? 1 : 0); }

}  // namespace ferry
