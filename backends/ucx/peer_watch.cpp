#include <ferry/backends/ucx/peer_watch.h>

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace ferry::detail {
namespace {

// Field 22 of /proc/<pid>/stat; 0 when unreadable. The command name (field 2) may contain
// spaces and parentheses, so counting starts after its last ')'.
uint64_t start_time_of(uint32_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)
    if (!(rest >> field)) return 0;
  return std::strtoull(field.c_str(), nullptr, 10);
}

// Field 3 of /proc/<pid>/stat (R, S, D, T, t, Z, ...); '?' when unreadable.
char state_of(uint32_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return '?';
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return '?';
  return line[close + 2];
}

}  // namespace

ProcessId self_process_id() {
  const auto pid = static_cast<uint32_t>(getpid());
  return ProcessId{pid, start_time_of(pid)};
}

PeerWatch::PeerWatch(int self, const std::vector<bool>& local, const std::vector<ProcessId>& ids)
    : fds_(ids.size(), -1), pids_(ids.size(), 0), reported_(ids.size(), false) {
  for (size_t r = 0; r < ids.size(); ++r) {
    if (static_cast<int>(r) == self || !local[r] || ids[r].pid == 0 || ids[r].start_time == 0)
      continue;
    // Through syscall(): glibc's <sys/pidfd.h> lacks C++ linkage here.
    const int fd = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(ids[r].pid), 0));
    if (fd < 0) continue;  // gone already, or another pid namespace: left to UCX
    // Checked after opening: the pidfd now pins this very process, whatever happens to the pid.
    if (start_time_of(ids[r].pid) != ids[r].start_time) {
      close(fd);
      continue;
    }
    fds_[r] = fd;
    pids_[r] = ids[r].pid;
  }
}

PeerWatch::~PeerWatch() {
  for (int fd : fds_)
    if (fd >= 0) close(fd);
}

void PeerWatch::append_fds(std::vector<pollfd>& fds) const {
  for (size_t r = 0; r < fds_.size(); ++r)
    if (fds_[r] >= 0 && !reported_[r]) fds.push_back(pollfd{fds_[r], POLLIN, 0});
}

bool PeerWatch::ended(int rank) const {
  if (fds_[rank] < 0) return true;
  pollfd p{fds_[rank], POLLIN, 0};
  int n;
  do n = poll(&p, 1, 0);
  while (n < 0 && errno == EINTR);
  return n != 0;  // readable once the process ended (or an error: assume the worst)
}

bool PeerWatch::stopped(int rank) const {
  // The pidfd pins the process while it has not ended, so the pid still names the peer.
  if (fds_[rank] < 0 || ended(rank)) return false;
  const char state = state_of(pids_[rank]);
  return state == 'T' || state == 't';
}

std::vector<int> PeerWatch::take_dead() {
  std::vector<pollfd>& fds = poll_fds_;  // kept from call to call: no allocation per sleep
  std::vector<int>& rank_of = poll_ranks_;
  fds.clear();
  rank_of.clear();
  for (size_t r = 0; r < fds_.size(); ++r) {
    if (fds_[r] < 0 || reported_[r]) continue;
    fds.push_back(pollfd{fds_[r], POLLIN, 0});
    rank_of.push_back(static_cast<int>(r));
  }
  std::vector<int> dead;
  if (fds.empty() || poll(fds.data(), fds.size(), 0) <= 0) return dead;
  for (size_t i = 0; i < fds.size(); ++i) {
    if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    reported_[rank_of[i]] = true;
    dead.push_back(rank_of[i]);
  }
  return dead;
}

int PeerWatch::watched() const {
  int n = 0;
  for (size_t r = 0; r < fds_.size(); ++r) n += fds_[r] >= 0 && !reported_[r] ? 1 : 0;
  return n;
}

}  // namespace ferry::detail
