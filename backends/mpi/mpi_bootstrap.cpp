#include <ferry/backends/mpi_bootstrap.h>

#include <ferry/backends/mpi/mpi_error.h>
#include <ferry/backends/mpi/mpi_exchange.h>
#include <ferry/backends/mpi/mpi_launcher_exit.h>
#include <ferry/backends/mpi/mpi_request.h>
#include <ferry/backends/mpi/mpi_transport.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>
#include <ferry/runtime/progress.h>

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace ferry::detail {
namespace {

std::mutex g_mu;
bool g_ferry_initialized_mpi = false;
// How long MPI_Finalize may take (FERRY_TIMEOUT when shorter). It returns within milliseconds
// when it works: every rank passed finalize's handshake just before.
constexpr std::chrono::seconds kFinalizeBound{10};
// How long mpiexec may take to acknowledge that a rank ends (it answers at once).
constexpr int kLauncherAckMs = 5000;
// How long the thread stuck in MPI_Finalize may take to stop once signalled.
constexpr std::chrono::seconds kParkWait{1};
// How much longer a rank waiting in mpiexec's barrier gives MPI_Finalize (see finalize_within).
constexpr std::chrono::seconds kBarrierGrace{2};

// Set by the thread stuck in MPI_Finalize once it stopped for good (park).
std::atomic<bool> g_parked{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");

// The stuck thread's signal handler: it never returns, so that thread touches nothing again
// (MPICH's socket to mpiexec above all, which it may be reading in its barrier).
void park(int) {
  g_parked.store(true);
  for (;;) ::pause();
}

// A real-time signal that MPICH, UCX and ferry leave alone; its handler is installed only when
// the process is about to end.
int park_signal() { return SIGRTMAX - 3; }

// Everything ferry and the program wrote so far reaches its file before MPI_Finalize: the
// program's stdout and stderr (C's streams and C++'s, which may be unsynchronized), ferry's log
// files (FERRY_DEBUG_FILE) and timeline (FERRY_TIMELINE), whatever else stdio holds. Should the
// bound end the process, nothing is lost. (Checkpoints are written and synced by their save.)
void flush_output() {
  std::cout.flush();
  std::clog.flush();
  std::cerr.flush();
  std::fflush(nullptr);
}

// Whether thread `tid` of this process is reading mpiexec's socket (PMI_FD): MPI_Finalize waits
// there in mpiexec's barrier. From /proc/self/task/<tid>/syscall: the call and its arguments.
bool in_launcher_barrier(pid_t tid) {
  const char* fd = std::getenv("PMI_FD");
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/syscall", static_cast<int>(tid));
  std::FILE* f = fd != nullptr ? std::fopen(path, "r") : nullptr;
  if (f == nullptr) return false;
  long call = -1;
  unsigned long first = 0;
  const bool read_call = std::fscanf(f, "%ld %lx", &call, &first) == 2 && call == SYS_read;
  std::fclose(f);
  return read_call && first == std::strtoul(fd, nullptr, 10);
}

// One line for stderr, written without stdio, whose lock the parked thread may hold.
constexpr size_t kLineMax = 512;
void say(const char* line, int length) {
  if (length > 0) (void)!::write(2, line, std::min(static_cast<size_t>(length), kLineMax - 1));
}

// The end of a process whose MPI_Finalize did not return in time, on the bound's thread: the
// thread in MPI_Finalize (`stuck`) is stopped for good, mpiexec is told that this rank ends on
// purpose (the PMI command MPI_Finalize would have sent last; with the stuck thread parked the
// socket is this thread's alone), and the process ends with `status`. Nothing of the program's
// runs on: its output was flushed before MPI_Finalize.
[[noreturn]] void end_stuck_finalize(pid_t stuck, int rank, std::chrono::milliseconds bound,
                                     int status, const char* context) {
  char line[kLineMax];
  say(line, std::snprintf(line, sizeof line, "ferry: rank %d: MPI_Finalize did not return within "
                          "%lld ms %s (MPICH over UCX's TCP can wait there forever); ending the "
                          "process with status %d\n", rank,
                          static_cast<long long>(bound.count()), context, status));
  // Should anything below wait after all (the parked thread holding a lock it needs), the
  // alarm's default action ends the process rather than leave it hanging.
  std::signal(SIGALRM, SIG_DFL);
  ::alarm(kLauncherAckMs / 1000 + 3);
  struct sigaction action{};
  action.sa_handler = park;
  sigemptyset(&action.sa_mask);
  sigaction(park_signal(), &action, nullptr);
  syscall(SYS_tgkill, getpid(), stuck, park_signal());
  const auto until = std::chrono::steady_clock::now() + kParkWait;
  while (!g_parked.load() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::string why = "the thread in MPI_Finalize did not stop";
  if (g_parked.load() && tell_launcher_rank_ends(kLauncherAckMs, &why)) {
    say(line, std::snprintf(line, sizeof line, "ferry: rank %d: mpiexec was told that this rank "
                            "ends on purpose\n", rank));
  } else {
    say(line, std::snprintf(line, sizeof line, "ferry: rank %d: mpiexec could not be told that "
                            "this rank ends on purpose (%s)\n", rank, why.c_str()));
  }
  std::_Exit(status);
}

}  // namespace

void finalize_within(const std::function<void()>& finalize_mpi, std::chrono::milliseconds bound,
                     int rank, int status, const char* context) {
  flush_output();
  std::mutex mu;
  std::condition_variable cv;
  bool returned = false;
  const pid_t self = static_cast<pid_t>(syscall(SYS_gettid));
  std::thread watch([&] {
    std::unique_lock<std::mutex> lock(mu);
    if (cv.wait_for(lock, bound, [&] { return returned; })) return;
    // A rank in mpiexec's barrier waits for one still in MPI_Finalize's earlier steps: either
    // that one enters the barrier soon (a slow finalize) and every rank returns, or it passes
    // its own bound and ends, after which the barrier can never complete. Telling mpiexec that
    // this rank ends while the barrier may still complete would break mpiexec (it would answer
    // the barrier on a socket it closed), so this rank waits that long first.
    if (in_launcher_barrier(self) && cv.wait_for(lock, kBarrierGrace, [&] { return returned; }))
      return;
    lock.unlock();
    end_stuck_finalize(self, rank, bound, status, context);
  });
  finalize_mpi();
  {
    std::lock_guard<std::mutex> lock(mu);
    returned = true;
  }
  cv.notify_one();
  watch.join();
}

bool mpi_built() { return true; }

std::shared_ptr<Transport> mpi_world_transport() {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    FERRY_CHECK(!finalized, InvalidArgument,
                "ferry::init: MPI is finalized already and cannot be initialized again");
    if (!initialized) {
      int provided = MPI_THREAD_SINGLE;
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided),
                "MPI_Init_thread", "ferry::init");
      g_ferry_initialized_mpi = true;
      FERRY_LOG(Info, "init", "MPI_Init_thread(MPI_THREAD_MULTIPLE) gave thread level ",
                provided);
      // MPICH reports some errors of requests on ferry's own communicators (a receive that a
      // longer message truncated) through MPI_COMM_WORLD's handler: returned, ferry turns them
      // into a MismatchError; with MPI's default handler they abort the job. A user who
      // initializes MPI keeps the handler they chose (docs/transports.md: the MPI transport).
      check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
                "MPI_Comm_set_errhandler", "ferry::init");
    } else {
      MPI_Errhandler handler = MPI_ERRHANDLER_NULL;
      MPI_Comm_get_errhandler(MPI_COMM_WORLD, &handler);
      if (handler != MPI_ERRORS_RETURN)
        FERRY_LOG(Info, "init", "MPI was initialized by the program and MPI_COMM_WORLD's error "
                  "handler is not MPI_ERRORS_RETURN: a collective whose ranks pass different "
                  "sizes may abort the job inside MPI instead of raising MismatchError");
      if (handler != MPI_ERRHANDLER_NULL) MPI_Errhandler_free(&handler);
    }
  }
  // Checks the thread level (which matters when someone else initialized MPI).
  return make_mpi_transport(MPI_COMM_WORLD);
}

bool mpi_finalize(bool peers_closed, int exit_status) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_ferry_initialized_mpi || !mpi_usable()) return false;
  // The thread that tests in-flight ops and steps all_reduce's second rounds must not call MPI
  // during or after MPI_Finalize.
  stop_background_progress();
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const auto bound = std::min<std::chrono::milliseconds>(kFinalizeBound, default_timeout());
  if (peers_closed && !anything_kept_forever()) {
    finalize_within([] { MPI_Finalize(); }, bound, rank, std::max(exit_status, 0),
                    "although every rank had finished");
    return true;
  }
  if (!peers_closed) {
    // A rank failed, hung or gave up, and every rank knows it (finalize's handshake carries it):
    // MPI_Finalize would wait in mpiexec's barrier for every rank of the job, a hung one too, so
    // every rank skips it alike and tells mpiexec that it ends on purpose (mpi_launcher_exit.h).
    std::string why;
    if (tell_launcher_rank_ends(kLauncherAckMs, &why)) {
      mpi_leave_unfinalized();
      std::fprintf(stderr, "ferry: rank %d: MPI_Finalize skipped after a failed or hung rank (it "
                   "would wait for every rank of the job); mpiexec was told that this rank ends "
                   "on purpose\n", rank);
      std::fflush(stderr);
      return true;
    }
    FERRY_LOG(Info, "init", "MPI_Finalize after a failure, since mpiexec cannot be told otherwise "
              "that this rank ends on purpose: ", why);
  }
  // A collective timed out on a group other than the world and can never complete (every rank
  // passed the handshake, so every rank enters MPI_Finalize), or the launcher is not one ferry
  // can tell that a rank ends on purpose. MPICH's MPI_Finalize returns once every rank entered
  // it (and it is what tells mpiexec that this rank ended on purpose, so the job ends cleanly
  // rather than being killed), but nothing guarantees it: the bound ends the process should it
  // wait, with the status of a failed job.
  FERRY_LOG(Info, "init", "MPI_Finalize after a failure; exiting in ", bound.count(),
            " ms if it does not return");
  finalize_within([] { MPI_Finalize(); }, bound, rank, exit_status > 0 ? exit_status : 1,
                  "after a failure");
  return true;
}

}  // namespace ferry::detail
