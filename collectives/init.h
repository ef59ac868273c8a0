// ferry::init(): the world Group of this process, on the transport the environment asks for.
//
//   FERRY_BACKEND unset  under mpiexec (Hydra's PMI_RANK / PMI_SIZE, or PMIX_RANK, or Open MPI's
//                        OMPI_COMM_WORLD_SIZE in the environment): mpi; otherwise local.
//   FERRY_BACKEND=mpi    MPI over MPI_COMM_WORLD. ferry initializes MPI with
//                        MPI_THREAD_MULTIPLE unless it is initialized already (then it must be at
//                        that level), and finalizes it only if it initialized it.
//   FERRY_BACKEND=local  a world of one rank, this process (each process of an mpiexec job is
//                        then its own world): for running a trainer without a launcher. Tests
//                        that want N local ranks use run_ranks instead.
//   FERRY_BACKEND=ucx    UCX (UCP) point-to-point under ferry's algorithms. The worker addresses
//                        are exchanged through the TCP rendezvous when FERRY_RENDEZVOUS is set
//                        (see backends/rendezvous/tcp_rendezvous.h), otherwise through MPI
//                        under mpiexec (initialized and finalized as for mpi; it carries only
//                        that exchange). Neither: InvalidArgument. Built without UCX:
//                        TransportError "built without UCX".
//
// FERRY_DEBUG=info prints the choice, why, and the algorithm table. A build without MPI raises
// TransportError "built without MPI" where MPI would be used.
#pragma once

#include <ferry/collectives/group.h>

#include <string>

namespace ferry {

// The world Group. Idempotent: later calls return the same group. Throws InvalidArgument for an
// unknown FERRY_BACKEND, TransportError for a backend that is not available.
Group init();

// The backend init() chose ("mpi", "ucx", "local"), or "" before init().
std::string backend_name();

// Ends what init() started: MPI_Finalize if ferry initialized MPI. After a collective timed out
// (MPI cannot cancel it, so the job must end) it still finalizes, under a 10 s watchdog that
// ends the process should MPI_Finalize wait for the stuck collective.
// Call it after every Work completed and before exit; Groups must not be used afterwards.
// If it is not called, it runs at exit (so a rank that returns from main early does not make
// mpiexec kill the ranks still finishing). Idempotent.
void finalize();

}  // namespace ferry
