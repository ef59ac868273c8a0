// How ferry waits for anything MPI progresses (internal).
//
// MPI progresses only inside MPI calls, and MPICH's own MPI_Wait spins on the core. ferry tests
// instead: back to back for 20 us (a small collective between two ranks finishes in about one),
// then test + sched_yield for up to 20 ms (progress continues, and an oversubscribed core goes
// to the ranks waited for: 3 ranks on 2 cores in the tests), then sleeping with a growing pause
// (up to 1 ms), so a rank that waits long for an absent peer stops using the core.
#pragma once

#include <ferry/backends/transport.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace ferry::detail {

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
  for (auto now = Clock::now(); now - start < kSpinFor + kYieldFor; now = Clock::now()) {
    if (now >= deadline) return test();
    std::this_thread::yield();
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
