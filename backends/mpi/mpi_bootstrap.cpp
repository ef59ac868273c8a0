#include <ferry/backends/mpi_bootstrap.h>

#include <ferry/backends/mpi/mpi_error.h>
#include <ferry/backends/mpi/mpi_exchange.h>
#include <ferry/backends/mpi/mpi_launcher_exit.h>
#include <ferry/backends/mpi/mpi_request.h>
#include <ferry/backends/mpi/mpi_transport.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>
#include <ferry/runtime/progress.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace ferry::detail {
namespace {

std::mutex g_mu;
bool g_ferry_initialized_mpi = false;
constexpr std::chrono::seconds kFinalizeWatchdog{10};
// How long mpiexec may take to acknowledge that a rank ends (it answers at once).
constexpr int kLauncherAckMs = 5000;

}  // namespace

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

bool mpi_finalize(bool peers_closed) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_ferry_initialized_mpi || !mpi_usable()) return false;
  // The thread that tests in-flight ops and steps all_reduce's second rounds must not call MPI
  // during or after MPI_Finalize.
  stop_background_progress();
  if (peers_closed && !anything_kept_forever()) {
    MPI_Finalize();
    return true;
  }
  if (!peers_closed) {
    // A rank failed, hung or gave up, and every rank knows it (finalize's handshake carries it):
    // MPI_Finalize would wait in mpiexec's barrier for every rank of the job, a hung one too, so
    // every rank skips it alike and tells mpiexec that it ends on purpose (mpi_launcher_exit.h).
    std::string why;
    if (tell_launcher_rank_ends(kLauncherAckMs, &why)) {
      mpi_leave_unfinalized();
      int rank = -1;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
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
  // rather than being killed), but nothing guarantees it: a watchdog ends the process should it
  // wait.
  FERRY_LOG(Info, "init", "MPI_Finalize after a failure; exiting in ", kFinalizeWatchdog.count(),
            " s if it does not return");
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread([done] {
    const auto until = std::chrono::steady_clock::now() + kFinalizeWatchdog;
    while (!done->load() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (done->load()) return;
    std::fprintf(stderr, "ferry: MPI_Finalize did not return within %d s after a failure; "
                 "ending the process\n", static_cast<int>(kFinalizeWatchdog.count()));
    std::fflush(stderr);
    std::_Exit(1);
  }).detach();
  MPI_Finalize();
  done->store(true);
  return true;
}

}  // namespace ferry::detail
