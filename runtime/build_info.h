// What this libferry.so was built with and can run: ferry-info prints it, a bug report quotes it.
#pragma once

#include <string>
#include <vector>

namespace ferry {

struct BuildInfo {
  std::string version;     // ferry::version()
  std::string compiler;    // "gcc 12.2.0"
  std::string build_type;  // Meson's buildtype: release, debugoptimized, debug, ...
  std::string mpi;         // the MPI library it was built against ("mpich 4.0.2"); "" without MPI
  std::string ucx;         // the UCX it was built against ("ucx 1.13.1"); "" without UCX
};

// Read from the build configuration, not probed: what was compiled in.
const BuildInfo& build_info();

// The transports this build can run, in FERRY_BACKEND's spelling: "local" always, then "mpi" and
// "ucx" when they were compiled in. Whether one can start here (mpiexec present, a UCX device)
// is another matter: ferry::init() says so when asked for it.
std::vector<std::string> available_transports();

}  // namespace ferry
