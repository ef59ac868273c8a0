// Settings read from FERRY_* environment variables, once, at first use.
//
//   FERRY_TIMEOUT   seconds every wait may last before TimeoutError (default 300; fractions ok)
//   FERRY_BACKEND   local | mpi | ucx: the transport ferry::init() picks (empty: automatic)
//   FERRY_ALGO      algorithm overrides, "all_reduce:ring,broadcast:tree" (see algorithm_table)
//   FERRY_DEBUG     off | info | trace: what ferry prints to stderr
//   FERRY_DEBUG_SUBSYS  comma list of subsystems to print (coll, transport, init); empty: all
//   FERRY_PROGRESS_THREAD  0: the thread that moves in-flight ops nobody waits for only
//                          watches them, it does not test them (runtime/progress.h); default 1
#pragma once

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
};

// The process-wide configuration (read from the environment the first time it is asked for).
const Config& config();

// Replaces the default deadline of every wait from now on; tests use it to keep timeouts short.
void set_default_timeout(std::chrono::milliseconds timeout);
std::chrono::milliseconds default_timeout();

}  // namespace ferry
