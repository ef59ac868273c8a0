// Stands in for backends/ucx when ferry is built without UCX: the core builds and runs, and
// asking for UCX says why it is not there.
#include <ferry/backends/ucx_bootstrap.h>

#include <ferry/runtime/error.h>

namespace ferry::detail {

bool ucx_built() { return false; }

std::shared_ptr<Transport> ucx_world_transport(bool, const RendezvousOptions*) {
  FERRY_THROW(TransportError,
              "FERRY_BACKEND=ucx, but this ferry was built without UCX (meson did not find ucx); "
              "install libucx-dev and rebuild, or choose FERRY_BACKEND=mpi or local");
}

}  // namespace ferry::detail
