#include "collectives/init.h"

#include "backends/local/local_transport.h"
#include "backends/mpi_bootstrap.h"
#include "runtime/config.h"
#include "runtime/error.h"
#include "runtime/log.h"

#include <cstdlib>
#include <mutex>

namespace ferry {
namespace {

struct InitState {
  std::mutex mu;
  Group world;
  std::string backend;
  bool finalized = false;
  bool at_exit_registered = false;
};

InitState& state() {
  static auto* s = new InitState();  // never destroyed: finalize() may run from atexit
  return *s;
}

// The launcher that started this process, if it is an MPI one ("" otherwise).
std::string mpi_launcher_hint() {
  for (const char* name : {"PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return name;
  }
  return "";
}

void finalize_at_exit() { finalize(); }

}  // namespace

Group init() {
  InitState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.world.valid()) return s.world;
  FERRY_CHECK(!s.finalized, InvalidArgument, "ferry::init: called after ferry::finalize()");
  std::string backend = config().backend;
  std::string why = "FERRY_BACKEND=" + backend;
  if (backend.empty()) {
    const std::string hint = mpi_launcher_hint();
    backend = hint.empty() ? "local" : "mpi";
    why = hint.empty() ? "no MPI launcher in the environment" : hint + " is set (an MPI launcher)";
    FERRY_CHECK(hint.empty() || detail::mpi_built(), TransportError, "ferry::init: ", why,
                ", but this ferry was built without MPI; rebuild with MPI (libmpich-dev) or set "
                "FERRY_BACKEND=local to run every process as a world of its own");
  }
  std::shared_ptr<Transport> transport;
  if (backend == "mpi") {
    transport = detail::mpi_world_transport();
    if (!s.at_exit_registered) {
      std::atexit(finalize_at_exit);
      s.at_exit_registered = true;
    }
  } else if (backend == "local") {
    transport = make_local_world(1)[0];
  } else if (backend == "ucx") {
    FERRY_THROW(TransportError, "ferry::init: FERRY_BACKEND=ucx: the UCX transport is not built "
                "yet; use mpi or local");
  } else {
    FERRY_THROW(InvalidArgument, "ferry::init: FERRY_BACKEND must be mpi, ucx or local, given '",
                backend, "'");
  }
  FERRY_LOG(Info, "init", "backend ", backend, " (", why, "): rank ", transport->rank(), " of ",
            transport->size());
  s.world = Group::world(std::move(transport));
  s.backend = backend;
  return s.world;
}

std::string backend_name() {
  InitState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.backend;
}

void finalize() {
  InitState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.finalized) return;
  s.finalized = true;
  // The world group's worker and communicators go first, while MPI still works.
  s.world = Group();
  if (s.backend == "mpi") detail::mpi_finalize();
}

}  // namespace ferry
