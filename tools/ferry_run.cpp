// ferry-run: starts an N-rank ferry job on this host without mpiexec, over the UCX transport
// joined by the TCP rendezvous (see tools/run/rank_processes.h).
//
//   ferry-run -n 3 [--timeout SECONDS] [--grace SECONDS] program [args...]
//
// Exit status 0 when every rank exited with 0; otherwise 1, with one line per failed rank.
// SIGINT / SIGTERM / SIGHUP are passed on to the ranks (SIGKILL after --grace); ferry-run then
// exits with 128 + the signal, as a shell reports a process a signal ended.
#include "tools/cli/args.h"
#include "tools/run/rank_processes.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int run_main(int argc, char** argv) {
  ferry::run::LaunchOptions o;
  namespace cli = ferry::cli;
  auto seconds = [](const char* flag, const std::string& v) {
    const double s = cli::parse_double(flag, v, 1e-3, 1e7);
    return std::chrono::milliseconds(static_cast<int64_t>(s * 1e3));
  };
  cli::Parser p("ferry-run", "[-n RANKS] [options] [--] program [args...]",
                "Starts RANKS processes of program on this host as one ferry job over the UCX\n"
                "transport (FERRY_BACKEND=ucx unless set), joined by a TCP rendezvous: mpiexec's\n"
                "role without MPI.");
  p.int_option("-n, --ranks", "processes to start (default 2)", &o.ranks, 1, 4096, "RANKS")
      .option("--timeout", "SECONDS", "stop the job (SIGTERM, then SIGKILL) after this long",
              [&](const std::string& v) { o.timeout = seconds("--timeout", v); })
      .option("--grace", "SECONDS", "between SIGTERM and SIGKILL when stopping the ranks",
              [&](const std::string& v) { o.grace = seconds("--grace", v); })
      .positional_rest("program")
      .epilog("Exit status 0 when every rank exited with 0; 1 otherwise, with one line per failed\n"
              "rank; 2 for a bad command line. SIGINT / SIGTERM / SIGHUP are passed on to the\n"
              "ranks; ferry-run then exits with 128 + the signal.");
  int i = p.parse(argc, argv);
  if (i >= argc) throw cli::UsageError("no program given");
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

}  // namespace

int main(int argc, char** argv) {
  return ferry::cli::guarded_main("ferry-run", [&] { return run_main(argc, argv); });
}
