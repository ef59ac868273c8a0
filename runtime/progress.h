// Progress while nobody waits (internal): one thread per process that keeps in-flight Works
// moving between their launch and their wait.
//
// Why: an op started at issue on a transport that moves data only inside its own calls (MPI's
// requests, the local transport's receiver-side copy, UCX's worker for an op not run by a group
// worker) advances only while some thread tests or waits for it. An op launched in one tape
// node and waited for in a later one (collectives/differentiable/req_wait.h) would then stand
// still while the nodes between them compute, and so would a peer that needs this rank's part
// of a rendezvous. Works queued on a group's worker need no help (the worker runs them), but
// the driver does not have to know which kind it was given: Work::is_completed() tests an op
// started at issue and only reads the flag of a queued one.
//
// What it watches: the Works it is given, the collectives of the Req/Wait nodes and whatever a
// user hands Work::progress_in_background; not every op started at issue. A blocking call is
// waited for at once, and a second thread testing it only competes for the cores: watching
// every MPI op started at issue made 32-64 KiB all_reduces 1.8-2.3x MPICH's time instead of
// 0.93-1.08x (ferry-bench --vs-mpi, 2 ranks on 2 cores).
//
// How: the thread tests every watched Work, sleeping between rounds for 50 us at first and
// twice as long after every round that completed nothing, up to 1 ms; with nothing watched it
// sleeps on a condition variable until the next watch. So it costs nothing while idle, at most
// a thousand short wake-ups a second while an op is in flight, and never spins (2 cores, 3-4
// ranks in the tests). Watching holds the Work weakly: a dropped Work is handled as before
// (its group finishes it), and the driver forgets it. A Work still in flight after twice its
// default deadline is forgotten too: its waiter reports the timeout. A Work watched with a first
// look (an op its waiter will most likely move first) is not tested, and does not wake the
// thread, before that time; one that its waiter completed meanwhile is forgotten at the next
// round, so that the waits of a DLRM step cost one wake-up of the thread, not one each.
//
// Pollers: a transport whose ops need a step of ferry's own between their rounds (MPI's
// point-to-point all_reduce posts its second round once the first finished) registers a poller,
// which this thread calls every round while it reports work in flight, and for 50 ms after it
// last did at 1 ms intervals (so a stream of such ops costs no wake-up per op). The poller wakes
// the thread when work appears (wake_background_progress): one atomic store and load while the
// thread is awake, a notify only when it sleeps; the rounds that wakes ask for run at least
// 0.5 ms apart (a wake is never dropped, only its round delayed). A delayed wake
// (wake_background_progress_after) asks for a round at a later time instead: the thread sleeps
// until the earliest such time, and a poller then reports work only for what is still due.
//
// FERRY_PROGRESS_THREAD=0 (a diagnostic switch) stops the thread from testing: it only reads
// whether a watched op completed, so an op moves only if its group's worker or a waiter moves it,
// as before this thread existed, and callbacks still run when it did complete.
#pragma once

#include <ferry/runtime/work.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

namespace ferry::detail {

// Tests `state` in the background until it completed, then calls `on_completed` (may be null)
// on the progress thread, whether the op succeeded or failed. With `first_look`, the first test
// comes no sooner than that after the call, and the thread is not woken for the op before then:
// for an op that its waiter will most likely move first (see Work::progress_in_background on a
// host whose ranks fill its cores), the thread then costs no wake-up and takes no lock of the
// transport's while the ranks compute.
void progress_in_background(std::weak_ptr<WorkState> state,
                            std::function<void()> on_completed = nullptr,
                            std::chrono::microseconds first_look = {});

// Something the progress thread steps while it has work (see "Pollers" above).
class BackgroundPoller {
 public:
  virtual ~BackgroundPoller() = default;
  // Steps whatever is in flight, without blocking; true while something still is. Runs on the
  // progress thread (FERRY_PROGRESS_THREAD=0 does not stop it: without it nothing would).
  virtual bool poll() = 0;
};

// Registers `poller`, which must live as long as the process. Polled from the next wake-up on.
void add_background_poller(BackgroundPoller* poller);
// A registered poller has work: the thread starts polling (and starts, if it is not running).
void wake_background_progress();
// The same for work that the thread that started it will most likely move itself (a collective
// on a host whose ranks fill its cores): the pollers' round comes `after` from now, and the
// thread is not woken for it sooner. Each wake-up of the thread took a core from a rank. Asks
// share the earliest one's round: a poller whose work is not due yet then asks again.
void wake_background_progress_after(std::chrono::microseconds after);
// The same for a round at `at` (a caller that has read the clock already: no second read).
void wake_background_progress_at(std::chrono::steady_clock::time_point at);

// Stops the thread and forgets what it watched (pollers stay registered); a later watch or wake
// starts it again. Called before MPI_Finalize: nothing may test an MPI request during or after
// it.
void stop_background_progress();

// For tests: rounds of tests run so far, and whether the thread sleeps with nothing watched.
uint64_t background_progress_rounds();
bool background_progress_asleep();

}  // namespace ferry::detail
