// ferry-bench without MPI: --transport mpi (or ucx, launched by mpiexec) says why it cannot run.
#include "tools/bench/launcher.h"
#include "tools/bench/options.h"

namespace ferry::bench {

std::unique_ptr<Launcher> make_mpi_launcher(const std::string& transport) {
  throw UsageError("transport " + transport + " needs mpiexec and MPI in ferry-bench, which is "
                   "not built into this ferry (meson did not find mpich)");
}

}  // namespace ferry::bench
