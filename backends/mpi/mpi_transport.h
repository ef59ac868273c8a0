// The MPI transport (MPICH): point-to-point on MPI_Isend / MPI_Irecv, and every collective on
// its non-blocking MPI call (see native_collectives.h).
//
// Thread level: ferry runs each group's collectives on a worker thread of the group and posts
// send / recv from the calling thread, so it needs MPI_THREAD_MULTIPLE. ferry::init() asks for
// it; a communicator handed in here must come from an MPI initialized with it.
#pragma once

#include <ferry/backends/transport.h>

#include <mpi.h>

#include <memory>

namespace ferry {

// A transport over a duplicate of `comm`, which stays the caller's: ferry neither initializes
// nor finalizes MPI, and never uses `comm` itself. Group::world(make_mpi_transport(comm)) is
// the group of comm's ranks, in comm's order. Throws InvalidArgument when MPI is not
// initialized (or already finalized) or was initialized below MPI_THREAD_MULTIPLE. Collective
// over `comm` (it duplicates it).
std::shared_ptr<Transport> make_mpi_transport(MPI_Comm comm);

// MPI_Finalize for a program that initialized MPI itself, bounded as ferry::finalize() bounds
// its own: MPICH over UCX's TCP (ranks on several hosts) sometimes never returns from it. Stops
// ferry's progress thread first (it may call MPI) and flushes the output. Should MPI_Finalize not
// return within 10 s, it says so on stderr, tells mpiexec that this rank ends on purpose and
// ends the process with `exit_status`. Call it once, after the program's last use of MPI and of
// ferry's groups over it.
void finalize_mpi_bounded(int exit_status);

}  // namespace ferry
