// Settings read from FERRY_* environment variables, once, at first use.
//
//   FERRY_TIMEOUT   seconds every wait may last before TimeoutError (default 300; fractions ok;
//                   from 0.001 to 1e9, see kMinTimeout / kMaxTimeout)
//   FERRY_BACKEND   local | mpi | ucx: the transport ferry::init() picks (empty: automatic)
//   FERRY_ALGO      algorithm overrides, "all_reduce:ring,broadcast:tree" (see algorithm_table)
//   FERRY_DEBUG     off | info | trace: what ferry prints to stderr
//   FERRY_DEBUG_SUBSYS  comma list of subsystems to print (coll, transport, init); empty: all
//   FERRY_CHECK     1: every collective first exchanges its fingerprint with every peer and a
//                   call that differs across ranks fails with MismatchError on every rank
//                   (collectives/engine/fingerprint.h); default 0
//   FERRY_PROGRESS_THREAD  0: the thread that moves in-flight ops nobody waits for only
//                          watches them, it does not test them (runtime/progress.h); default 1
#pragma once

#include <algorithm>
#include <chrono>
#include <string>

namespace ferry {

struct Config {
  std::chrono::milliseconds timeout{300'000};
  std::string backend;
  std::string algo;
  std::string debug = "off";
  std::string debug_subsys;
  bool progress_thread = true;
  bool check = false;
};

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
inline std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  const auto now = std::chrono::steady_clock::now();
  if (timeout <= std::chrono::milliseconds::zero()) return now;
  return now + std::min(timeout, 2 * kMaxTimeout);
}

// Seconds as FERRY_TIMEOUT takes them, checked against [kMinTimeout, kMaxTimeout]; throws
// InvalidArgument naming `variable` otherwise (inf, nan, 1e300, 0.0001, "abc").
std::chrono::milliseconds parse_timeout(const char* variable, const std::string& text);

}  // namespace detail

// Whether collectives exchange their fingerprints before they run (FERRY_CHECK). Every rank must
// agree; set_check_mode, for tests, replaces the configured value from now on.
bool check_mode();
void set_check_mode(bool on);

}  // namespace ferry
