#include <ferry/runtime/config.h>

#include <ferry/runtime/error.h>

#include <atomic>
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
  std::string timeout = env_or("FERRY_TIMEOUT", "");
  if (!timeout.empty()) {
    char* end = nullptr;
    double seconds = std::strtod(timeout.c_str(), &end);
    FERRY_CHECK(end != timeout.c_str() && *end == '\0' && seconds > 0, InvalidArgument,
                "FERRY_TIMEOUT: expected a positive number of seconds, given '", timeout, "'");
    c.timeout = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0 + 0.5));
  }
  c.backend = env_or("FERRY_BACKEND", "");
  c.algo = env_or("FERRY_ALGO", "");
  c.debug = env_or("FERRY_DEBUG", "off");
  c.debug_subsys = env_or("FERRY_DEBUG_SUBSYS", "");
  const std::string progress = env_or("FERRY_PROGRESS_THREAD", "1");
  FERRY_CHECK(progress == "0" || progress == "1", InvalidArgument,
              "FERRY_PROGRESS_THREAD: expected 0 or 1, given '", progress, "'");
  c.progress_thread = progress == "1";
  return c;
}

std::atomic<int64_t>& timeout_override_ms() {
  static std::atomic<int64_t> ms{0};  // 0: use the configured value
  return ms;
}

}  // namespace

const Config& config() {
  static const Config c = read_config();
  return c;
}

void set_default_timeout(std::chrono::milliseconds timeout) {
  FERRY_CHECK(timeout.count() > 0, InvalidArgument,
              "set_default_timeout: expected a positive timeout, given ", timeout.count(), " ms");
  timeout_override_ms().store(timeout.count());
}

std::chrono::milliseconds default_timeout() {
  int64_t ms = timeout_override_ms().load();
  return ms > 0 ? std::chrono::milliseconds(ms) : config().timeout;
}

}  // namespace ferry
