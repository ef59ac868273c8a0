#include "backends/mpi_bootstrap.h"

#include "backends/mpi/mpi_error.h"
#include "backends/mpi/mpi_request.h"
#include "backends/mpi/mpi_transport.h"
#include "runtime/error.h"
#include "runtime/log.h"

#include <atomic>
#include <mutex>

namespace ferry::detail {
namespace {

std::mutex g_mu;
bool g_ferry_initialized_mpi = false;

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
    }
  }
  // Checks the thread level (which matters when someone else initialized MPI).
  return make_mpi_transport(MPI_COMM_WORLD);
}

bool mpi_finalize() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_ferry_initialized_mpi || !mpi_usable()) return false;
  if (anything_kept_forever()) {
    FERRY_LOG(Info, "init", "MPI_Finalize skipped: a collective timed out and MPI cannot cancel "
              "it; the process must end");
    return false;
  }
  MPI_Finalize();
  return true;
}

}  // namespace ferry::detail
