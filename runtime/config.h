// Every FERRY_* environment variable, read in one place (config.cpp, config_parse.cpp), once,
// at first use (ferry::init() asks first, so a bad value fails init naming the variable).
//
// One set of rules for all of them: values are case-insensitive (FERRY_DEBUG=INFO works);
// booleans take 1/0, true/false, yes/no, on/off; numbers have a documented range; anything
// else throws InvalidArgument naming the variable, what it accepts and what it was given. A
// FERRY_* name that is not one of known_settings() draws a warning on stderr naming the nearest
// known name (FERRY_TIMEOUTS: did you mean FERRY_TIMEOUT?). FERRY_DEBUG=info prints the
// effective settings at init. docs/environment.md's table of variables is checked against
// known_settings() by tests/runtime/test_config.cpp.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace ferry {

struct Config {
  std::chrono::milliseconds timeout{300'000};  // FERRY_TIMEOUT
  std::string backend;                         // FERRY_BACKEND: "", local, mpi, ucx
  std::string algo;                            // FERRY_ALGO (parsed by the algorithm table)
  std::string debug = "off";                   // FERRY_DEBUG: off, warn, info, trace
  std::string debug_file;                      // FERRY_DEBUG_FILE ("": stderr)
  std::string debug_subsys;                    // FERRY_DEBUG_SUBSYS, lower case
  // FERRY_STALL_WARN_S: how long a collective waits before a WARN line names the ranks it waits
  // for; -1: min(60 s, a quarter of the op's deadline); 0: never.
  std::chrono::milliseconds stall_warn{-1};
  std::string timeline;                        // FERRY_TIMELINE ("": no timeline)
  bool progress_thread = true;                 // FERRY_PROGRESS_THREAD
  bool check = false;                          // FERRY_CHECK
  int64_t host_cache_mb = 256;                 // FERRY_HOST_CACHE_MB
  bool huge_pages = true;                      // FERRY_HUGE_PAGES
  bool mpi_persistent = true;                  // FERRY_MPI_PERSISTENT
  bool mpi_exchange = true;                    // FERRY_MPI_EXCHANGE
  bool shm_peer_reads = true;                  // FERRY_SHM_PEER_READS
  bool ucx_cma = true;                         // FERRY_UCX_CMA
  uint64_t ucx_cma_min_bytes = 0;              // FERRY_UCX_CMA_MIN_BYTES (0: the transport's)
  bool ucx_peer_errors = true;                 // FERRY_UCX_ERROR_HANDLING: peer (true), none
  // The TCP rendezvous's variables, as given: they depend on each other (a rank below the world
  // size), so tcp_rendezvous.cpp checks them when a rendezvous is asked for.
  std::string rendezvous, rank, world_size, secret, rendezvous_bind;
  // A listening socket that ferry-run opened and passed to rank 0 (-1: none): see
  // socket_io.h's listen_on.
  int rendezvous_fd = -1;
};

// One known variable: what it accepts and its default, as docs/environment.md's table shows them.
struct SettingInfo {
  const char* name;
  const char* accepts;
  const char* fallback;
  bool documented;  // false: a tool's or a test's own switch, not in docs/environment.md
};
const std::vector<SettingInfo>& known_settings();

// The process-wide configuration (read from the environment the first time it is asked for).
const Config& config();

// The range of a default timeout (FERRY_TIMEOUT, set_default_timeout); anything else is refused
// with InvalidArgument. The top (about 31 years) keeps every deadline ferry computes from it
// (twice it, plus now) inside the steady clock's range.
inline constexpr std::chrono::milliseconds kMinTimeout{1};
inline constexpr std::chrono::milliseconds kMaxTimeout{1'000'000'000'000};

// Replaces the default deadline of every wait from now on; tests use it to keep timeouts short.
void set_default_timeout(std::chrono::milliseconds timeout);
std::chrono::milliseconds default_timeout();

namespace detail {

// now + `timeout` on the steady clock without overflow: a timeout past twice kMaxTimeout
// (Work::wait(milliseconds::max())) waits that long, which is forever for a job, and a
// negative one is already past. Twice the largest default timeout plus now stays far inside
// the clock's range (about 292 years of nanoseconds since boot).
inline std::chrono::steady_clock::time_point deadline_after(
    std::chrono::milliseconds timeout, std::chrono::steady_clock::time_point now) {
  if (timeout <= std::chrono::milliseconds::zero()) return now;
  return now + std::min(timeout, 2 * kMaxTimeout);
}
inline std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  return deadline_after(timeout, std::chrono::steady_clock::now());
}

// The configuration `get` (a getenv) describes; throws InvalidArgument for a bad value.
Config read_config(const std::function<const char*(const char*)>& get);
// 1/0, true/false, yes/no, on/off in any case; throws InvalidArgument naming `variable`.
bool parse_bool(const char* variable, const std::string& text);
// The FERRY_* names of `environ`-style `env` that are not known settings, each with the
// nearest known name: {"FERRY_TIMEOUTS", "FERRY_TIMEOUT"}.
std::vector<std::pair<std::string, std::string>> unknown_settings(char** env);
// "FERRY_TIMEOUT=300 s, FERRY_CHECK=0, ..." for FERRY_DEBUG=info (the secret is not shown).
std::string describe_settings(const Config& c);

// Seconds as FERRY_TIMEOUT takes them, checked against [kMinTimeout, kMaxTimeout]; throws
// InvalidArgument naming `variable` otherwise (0x10, inf, nan, 1e300, 0.0001, "abc"). Plain
// decimals only ("300", "2.5", "1e3"), whatever the C locale.
std::chrono::milliseconds parse_timeout(const char* variable, const std::string& text);

}  // namespace detail

// When a waiting collective says so (FERRY_STALL_WARN_S): after `stall_warning_after(span)`,
// where `span` is the op's time from start to deadline; zero when the warning is off.
// set_stall_warning replaces the configured value from now on (tests): a positive duration, zero
// (off) or a negative one (back to automatic: min(60 s, span / 4)).
std::chrono::milliseconds stall_warning_after(std::chrono::milliseconds span);
void set_stall_warning(std::chrono::milliseconds after);

// Whether collectives exchange their fingerprints before they run (FERRY_CHECK). Every rank must
// agree; set_check_mode, for tests, replaces the configured value from now on.
bool check_mode();
void set_check_mode(bool on);

}  // namespace ferry
