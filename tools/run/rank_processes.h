// Starting the ranks of a job as processes of this host, joined by the TCP rendezvous
// (FERRY_RENDEZVOUS on loopback, a fresh random FERRY_SECRET, FERRY_RANK, FERRY_WORLD_SIZE):
// ferry-run and the UCX tests use it to run ferry without mpiexec. The launcher listens on the
// rendezvous port itself and rank 0 inherits that socket (FERRY_RENDEZVOUS_FD), so the port
// cannot be taken by another process before rank 0 uses it.
//
// Waiting blocks in sigtimedwait for SIGCHLD (no polling loop). When a rank fails, the others
// get `grace` to finish (they should fail fast on their own: a dead peer raises PeerFailure);
// whatever still runs then, or at `timeout`, is killed (SIGTERM, then SIGKILL), so a launch
// never outlives its timeout by more than a second.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace ferry::run {

struct LaunchOptions {
  int ranks = 2;
  std::vector<std::string> argv;                            // program and arguments
  std::vector<std::pair<std::string, std::string>> env;     // added to (or replacing) ours
  std::chrono::milliseconds timeout{600'000};
  std::chrono::milliseconds grace{20'000};
  int port = 0;  // 0: a free loopback port, picked when the launcher binds it
  // SIGINT, SIGTERM and SIGHUP sent to this process are passed on to every running rank, which
  // then gets `grace` before SIGKILL (ferry-run sets it; a Ctrl-C must not orphan the ranks).
  bool forward_signals = false;
};

struct RankExit {
  int rank = 0;
  bool exited = false;   // normal exit (status is valid)
  int status = 0;
  int signal = 0;        // the signal that ended it (when !exited)
  bool killed_by_us = false;
  double seconds = 0;    // from the launch to its end
};

// Runs the job to its end. Throws std::runtime_error when a process cannot be started.
// `forwarded` (optional) receives the first signal passed on to the ranks, 0 if none.
std::vector<RankExit> launch_ranks(const LaunchOptions& options, int* forwarded = nullptr);

// "rank 2 exited with status 1" / "rank 1 was killed by signal 9" ...
std::string describe(const RankExit& e);

// A TCP socket listening on 127.0.0.1:port (0: a port the kernel picks), close-on-exec;
// throws std::runtime_error naming the port and the reason when it cannot be bound.
int listen_on_loopback(int port);
// The port a socket is bound to (0 if unknown).
int listening_port(int fd);

}  // namespace ferry::run
