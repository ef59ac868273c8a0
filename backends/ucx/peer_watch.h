// Watches the processes of the ranks on this host, so that a dead one is known at once
// (internal).
//
// UCX finds dead peers through its keepalive, but on shared memory that proved unreliable here
// (UCX 1.13: a survivor sometimes never noticed, and waited until its deadline). A pidfd
// (pidfd_open) becomes readable the moment its process ends, so sleeping waiters poll the
// pidfds of their local peers next to the worker's event fd and wake when one dies. Each rank
// publishes its pid and its start time; a peer is watched only when /proc shows a process with
// that pid and start time on this host (same host name, same pid namespace), so a pid that
// means another process here is never mistaken for the peer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <poll.h>

namespace ferry::detail {

struct ProcessId {
  uint32_t pid = 0;
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22 (clock ticks since boot)
};

// This process.
ProcessId self_process_id();

class PeerWatch {
 public:
  PeerWatch() = default;
  // `local[r]`: rank r runs on this host. Ranks whose process cannot be verified are not
  // watched (UCX's keepalive still covers them).
  PeerWatch(int self, const std::vector<bool>& local, const std::vector<ProcessId>& ids);
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // Appends the pidfds of the peers watched and not reported dead.
  void append_fds(std::vector<pollfd>& fds) const;
  // The watched ranks whose process ended since the last call (each reported once).
  std::vector<int> take_dead();
  int watched() const;

  // For reading a peer's memory (ucx_cma.h); safe from any thread, without the caller's lock.
  // Whether `rank` is watched: its pid then names the very process that rank runs in, for as
  // long as ended(rank) is false (a pid is not reused while its process exists).
  bool watched(int rank) const { return fds_[rank] >= 0; }
  uint32_t pid(int rank) const { return pids_[rank]; }
  bool ended(int rank) const;
  // Whether the watched `rank`'s process is stopped (SIGSTOP, a debugger): it can move nothing
  // until someone resumes it, so a transfer from it that has begun will not finish. False when
  // not watched, ended, or unreadable.
  bool stopped(int rank) const;

 private:
  // fds_ and pids_ do not change after construction (the pidfds stay open until the end, so
  // that ended() can ask them at any time); reported_ changes in take_dead only.
  std::vector<int> fds_;  // by rank, -1 when not watched
  std::vector<uint32_t> pids_;
  std::vector<bool> reported_;
  // take_dead's lists of the pidfds it polls and their ranks (its callers hold the worker's lock).
  std::vector<pollfd> poll_fds_;
  std::vector<int> poll_ranks_;
};

}  // namespace ferry::detail
