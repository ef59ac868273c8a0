// How a rank waits on a word its peers write in shared memory, and how it learns that a peer's
// process is gone (internal).
//
// A peer's hand-off arrives within a microsecond when both run, so a waiter first spins on the
// word (with a pause, leaving the core's other hyperthread its share); waking a sleeping
// process costs ~20 us here, so sleeping at once would make an 8 B all_reduce twenty times
// slower. But when the host's ranks outnumber its cores, the peer being waited for may need this
// very core: there the waiter yields a few times and then sleeps on a futex on the shared word,
// so 4 ranks on 2 cores do not spin each other out (MPICH, which spins, takes 5-8 ms per 8 B
// all_reduce there).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ferry::detail::shm {

// Sleeps while *word == expected, at most `timeout` (a futex on a shared mapping: the waker may
// be another process). Returns at once when the word differs; may return early.
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout);
// Wakes every sleeper on `word`, in any process.
void futex_wake_all(std::atomic<uint32_t>* word);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// The group's peers' processes, watched through pidfds (a pid the kernel reused for another
// process is never mistaken for the peer), or kill(pid, 0) where pidfd_open is missing.
class PeerProcesses {
 public:
  PeerProcesses() = default;
  // `pids` by group rank; `self` is not watched.
  PeerProcesses(const std::vector<int>& pids, int self);
  ~PeerProcesses();
  PeerProcesses(PeerProcesses&& other) noexcept;
  PeerProcesses& operator=(PeerProcesses&& other) noexcept;
  PeerProcesses(const PeerProcesses&) = delete;
  PeerProcesses& operator=(const PeerProcesses&) = delete;

  // The group rank of a peer whose process ended, or -1. A system call per peer: asked between
  // the slices of a slow wait, never on the fast path.
  int first_ended() const;
  int pid(int rank) const { return pids_[static_cast<size_t>(rank)]; }

 private:
  std::vector<int> pids_;
  std::vector<int> fds_;  // -1: no pidfd (this rank, or pidfd_open failed)
  int self_ = -1;
};

}  // namespace ferry::detail::shm
