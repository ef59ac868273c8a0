// ferry-bench without MPI: --transport mpi says why it cannot run.
#include "tools/bench/launcher.h"
#include "tools/bench/options.h"

namespace ferry::bench {

std::unique_ptr<Launcher> make_mpi_launcher() {
  throw UsageError("transport mpi is not built into this ferry (meson did not find mpich)");
}

}  // namespace ferry::bench
