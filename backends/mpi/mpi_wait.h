// How ferry waits for anything MPI progresses (internal).
//
// MPI progresses only inside MPI calls, and MPICH's own MPI_Wait spins on the core. ferry tests
// instead: back to back for 20 us (a small collective between two ranks finishes in about one),
// then for up to 20 ms either on (each rank has a core of its own) or with a sched_yield between
// tests (the host's ranks outnumber its cores: the core goes to the ranks waited for, 3 ranks
// on 2 cores in the tests), in both cases running the thread's idle work (idle_work.h) between
// tests where it has some, then sleeping with a growing pause (up to 1 ms), so a rank that
// waits long for an absent peer stops using the core.
//
// Why not always yield: on Linux's EEVDF scheduler a sched_yield moves the caller's deadline one
// slice (about a millisecond) back, so when a thread of the same rank is runnable (a data loader,
// the group's worker) one yield hands it the core for that long, while the message waited for
// arrives in microseconds. 2 ranks on 2 cores, DLRM step at batch 128: 2.2 ms yielding, 1.6 ms
// not (ferry-dlrm --bench, alternating).
#pragma once

#include <ferry/backends/transport.h>
#include <ferry/runtime/idle_work.h>
#include <ferry/runtime/wait_policy.h>  // FERRY_CPU_RELAX

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

namespace ferry::detail {

// Whether waits yield between tests (see above); set once the transport knows how many ranks
// share this host. Until then (and without MPI_COMM_TYPE_SHARED) they yield, the safe choice.
inline std::atomic<bool> mpi_waits_yield{true};
inline void set_mpi_waits_yield(bool yield) { mpi_waits_yield.store(yield); }

// Polls `test` (true once finished) until it returns true or `deadline` passes; false on
// expiry. Callers wait in slices (to notice a poisoned group), so the spin and yield phases
// count from `first_wait`, set by the first call: a long wait for a late peer then sleeps
// instead of spinning again in every slice.
template <class Test>
bool wait_polling_mpi(Test&& test, Clock::time_point& first_wait, Clock::time_point deadline) {
  constexpr auto kSpinFor = std::chrono::microseconds(20);
  constexpr auto kYieldFor = std::chrono::milliseconds(20);
  constexpr auto kFirstSleep = std::chrono::microseconds(20);
  constexpr auto kLongestSleep = std::chrono::microseconds(1000);
  if (test()) return true;
  if (first_wait == Clock::time_point{}) first_wait = Clock::now();
  const auto start = first_wait;
  for (auto now = Clock::now(); now - start < kSpinFor; now = Clock::now()) {
    if (now >= deadline) return test();
    for (int i = 0; i < 16; ++i) {
      if (test()) return true;
    }
  }
  const bool yield = mpi_waits_yield.load(std::memory_order_relaxed);
  for (auto now = Clock::now(); now - start < kSpinFor + kYieldFor; now = Clock::now()) {
    if (now >= deadline) return test();
    if (run_idle_work()) {
      // The thread's registered work ran one piece instead of this look (idle_work.h).
    } else if (yield) {
      std::this_thread::yield();
    } else {
      FERRY_CPU_RELAX();
    }
    if (test()) return true;
  }
  auto pause = std::chrono::duration_cast<Clock::duration>(
      Clock::now() - start > kSpinFor + kYieldFor + kLongestSleep ? kLongestSleep : kFirstSleep);
  for (;;) {
    const auto now = Clock::now();
    if (now >= deadline) return test();
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    if (test()) return true;
    pause = std::min<Clock::duration>(pause * 2, kLongestSleep);
  }
}

}  // namespace ferry::detail
