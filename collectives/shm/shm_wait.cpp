#include <ferry/collectives/shm/shm_wait.h>

#include <cerrno>
#include <climits>
#include <utility>

#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace ferry::detail::shm {

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) return;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  // Not FUTEX_PRIVATE_FLAG: the word is in a mapping shared with other processes.
  (void)syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr,
                0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  (void)syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr,
                nullptr, 0);
}

PeerProcesses::PeerProcesses(const std::vector<int>& pids, int self)
    : pids_(pids), fds_(pids.size(), -1), self_(self) {
#ifdef SYS_pidfd_open
  for (size_t r = 0; r < pids_.size(); ++r) {
    if (static_cast<int>(r) == self_ || pids_[r] <= 0) continue;
    fds_[r] = static_cast<int>(syscall(SYS_pidfd_open, pids_[r], 0));
  }
#endif
}

PeerProcesses::~PeerProcesses() {
  for (int fd : fds_)
    if (fd >= 0) close(fd);
}

PeerProcesses::PeerProcesses(PeerProcesses&& other) noexcept
    : pids_(std::move(other.pids_)), fds_(std::move(other.fds_)), self_(other.self_) {
  other.fds_.clear();
}

PeerProcesses& PeerProcesses::operator=(PeerProcesses&& other) noexcept {
  if (this != &other) {
    for (int fd : fds_)
      if (fd >= 0) close(fd);
    pids_ = std::move(other.pids_);
    fds_ = std::move(other.fds_);
    self_ = other.self_;
    other.fds_.clear();
  }
  return *this;
}

int PeerProcesses::first_ended() const {
  for (size_t r = 0; r < pids_.size(); ++r) {
    if (static_cast<int>(r) == self_ || pids_[r] <= 0) continue;
    if (fds_[r] >= 0) {
      // A pidfd is readable once its process ended (a zombie included).
      pollfd p{fds_[r], POLLIN, 0};
      if (poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP)) != 0) return static_cast<int>(r);
    } else if (kill(pids_[r], 0) != 0 && errno == ESRCH) {
      return static_cast<int>(r);
    }
  }
  return -1;
}

}  // namespace ferry::detail::shm
