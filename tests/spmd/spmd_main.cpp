// The main() of a process-per-rank SPMD suite: every registered case (FT_SPMD_CASE of
// tests/collectives or DG_CASE of tests/differentiable, whichever is linked in), once per
// process, on ferry::init()'s world (see tests/spmd/spmd.h): MPI under mpiexec, UCX with
// FERRY_BACKEND=ucx under mpiexec or ferry-run. For example
//   mpiexec -n 3 build/tests/mpi/test_collectives_mpi [name or tag substrings...]
// The Catch2 test cases linked in with the bodies are not run here (Catch2's implementation,
// which they link against, comes from catch2_dep).
#include "tests/spmd/spmd.h"

int main(int argc, char** argv) { return spmd::main_under_mpi(argc, argv); }
