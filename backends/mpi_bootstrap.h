// Starting and ending MPI for ferry::init() (internal). Compiled whether or not ferry is built
// with MPI (backends/no_mpi.cpp stands in without it), so callers need no <mpi.h>.
#pragma once

#include <ferry/backends/transport.h>

#include <memory>
#include <string>

namespace ferry::detail {

// False when this ferry was built without MPI.
bool mpi_built();

// Initializes MPI with MPI_THREAD_MULTIPLE unless it is initialized already (then checks that
// level), and returns a transport over MPI_COMM_WORLD. Throws TransportError without MPI.
std::shared_ptr<Transport> mpi_world_transport();

// MPI_Finalize, when ferry initialized MPI and it is not finalized yet; returns whether MPI was
// ended. `peers_closed`: every rank passed finalize's handshake and none of them had failed
// (world_handshake.h). Without it (a rank failed, hung or never came, which every rank of the job
// then knows), MPI_Finalize would wait for every rank, a hung one too: under MPICH's mpiexec
// ferry skips it and tells mpiexec that the rank ends on purpose (one line on stderr says so);
// under another launcher, or after a collective timed out on another group (MPI cannot cancel
// it), it still runs, under a watchdog that ends the process should it wait for the other ranks.
bool mpi_finalize(bool peers_closed);

}  // namespace ferry::detail
