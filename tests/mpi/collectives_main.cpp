// The collective suite under mpiexec: every FT_SPMD_CASE of tests/collectives, once per
// process, on the MPI world (see tests/spmd/spmd.h). Run with
//   mpiexec -n 3 build/tests/mpi/test_collectives_mpi [name or tag substrings...]
// The Catch2 test cases linked in with the bodies are not run here; this only provides
// Catch2's implementation for them to link against.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "tests/spmd/spmd.h"

int main(int argc, char** argv) { return spmd::main_under_mpi(argc, argv); }
