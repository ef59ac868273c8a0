// Stands in for backends/mpi when ferry is built without MPI (MLX's no_mpi.cpp pattern): the
// core builds and runs, and asking for MPI says why it is not there.
#include <ferry/backends/mpi_bootstrap.h>

#include <ferry/runtime/error.h>

namespace ferry::detail {

bool mpi_built() { return false; }

std::shared_ptr<Transport> mpi_world_transport() {
  FERRY_THROW(TransportError,
              "the mpi transport was asked for, but this ferry was built without MPI (meson did "
              "not find mpich); install libmpich-dev and rebuild, or set FERRY_BACKEND=local");
}

bool mpi_finalize(bool, int) { return false; }

}  // namespace ferry::detail
