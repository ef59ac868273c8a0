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

// MPI_Finalize, when ferry initialized MPI and it is not finalized yet; returns whether it ran.
// `peers_closed`: every rank passed finalize's handshake (world_handshake.h). Without it (a peer
// failed or never came), or after a collective timed out (MPI cannot cancel it), it still runs,
// under a watchdog that ends the process should MPI_Finalize wait for the missing ranks.
bool mpi_finalize(bool peers_closed);

}  // namespace ferry::detail
