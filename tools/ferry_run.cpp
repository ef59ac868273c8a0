// ferry-run: starts an N-rank ferry job on this host without mpiexec, over the UCX transport
// joined by the TCP rendezvous (see tools/run/rank_processes.h).
//
//   ferry-run -n 3 [--timeout SECONDS] [--grace SECONDS] program [args...]
//
// Exit status 0 when every rank exited with 0; otherwise 1, with one line per failed rank.
// SIGINT / SIGTERM / SIGHUP are passed on to the ranks (SIGKILL after --grace); ferry-run then
// exits with 128 + the signal, as a shell reports a process a signal ended.
#include "tools/run/rank_processes.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "ferry-run: %s\nusage: ferry-run -n RANKS [--timeout SECONDS] "
               "[--grace SECONDS] program [args...]\n", why);
  std::exit(2);
}

double number(const char* flag, const char* value) {
  if (value == nullptr) usage((std::string(flag) + " needs a value").c_str());
  char* end = nullptr;
  const double x = std::strtod(value, &end);
  if (end == value || *end != '\0' || x <= 0)
    usage((std::string(flag) + ": expected a positive number, given '" + value + "'").c_str());
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  ferry::run::LaunchOptions o;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; ++i) {
    const std::string flag = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (flag == "-n") {
      const double n = number("-n", value);
      if (n != static_cast<double>(static_cast<int>(n)) || n > 4096)
        usage("-n: expected a whole number of ranks in [1, 4096]");
      o.ranks = static_cast<int>(n);
    } else if (flag == "--timeout") {
      o.timeout = std::chrono::milliseconds(static_cast<int64_t>(number("--timeout", value) * 1e3));
    } else if (flag == "--grace") {
      o.grace = std::chrono::milliseconds(static_cast<int64_t>(number("--grace", value) * 1e3));
    } else if (flag == "--") {
      ++i;
      break;
    } else {
      usage(("unknown flag " + flag).c_str());
    }
    ++i;
  }
  if (i >= argc) usage("no program given");
  for (; i < argc; ++i) o.argv.push_back(argv[i]);
  o.forward_signals = true;
  std::vector<ferry::run::RankExit> exits;
  int forwarded = 0;
  try {
    exits = ferry::run::launch_ranks(o, &forwarded);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferry-run: %s\n", e.what());
    return 2;
  }
  int failed = 0;
  for (const ferry::run::RankExit& e : exits) {
    if (e.exited && e.status == 0) continue;
    ++failed;
    std::fprintf(stderr, "ferry-run: %s after %.1f s\n", ferry::run::describe(e).c_str(),
                 e.seconds);
  }
  if (forwarded != 0) {
    std::fprintf(stderr, "ferry-run: passed signal %d (%s) on to the ranks\n", forwarded,
                 strsignal(forwarded));
    return 128 + forwarded;
  }
  return failed == 0 ? 0 : 1;
}
