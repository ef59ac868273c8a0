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
//
// FERRY_BACKEND unset, no MPI launcher, but another launcher started several processes
// (torchrun's RANK / WORLD_SIZE, srun's SLURM_PROCID / SLURM_NTASKS: see
// backends/rendezvous/launch_env.h): ucx through the TCP rendezvous at the launcher's address
// (MASTER_ADDR:MASTER_PORT), FERRY_SECRET still required. Such a job never falls back to a
// world of one process silently: what is missing is named.
//
// FERRY_DEBUG=info prints the choice, why, and the algorithm table. A build without MPI raises
// TransportError "built without MPI" where MPI would be used.
#pragma once

#include <ferry/backends/rendezvous/launch_env.h>
#include <ferry/collectives/group.h>
#include <ferry/runtime/build_info.h>  // available_transports(): what `backend` may name

#include <chrono>
#include <string>
#include <vector>

namespace ferry {

// init() from code instead of (or on top of) the environment: a field left at its default is
// read from the environment as init() does; one that is set wins over it.
struct InitOptions {
  std::string backend;      // "local", "mpi", "ucx"; "": FERRY_BACKEND, then the launcher
  // The TCP rendezvous (ucx without MPI): this rank, the number of ranks, rank 0's address
  // ("host:port"), the job's secret, the address rank 0 binds. Setting rank, world_size or
  // rendezvous with no backend chooses ucx.
  int rank = -1;            // -1: FERRY_RANK, RANK, SLURM_PROCID
  int world_size = -1;      // -1: FERRY_WORLD_SIZE, WORLD_SIZE, SLURM_NTASKS
  std::string rendezvous;   // "": FERRY_RENDEZVOUS, MASTER_ADDR:MASTER_PORT
  std::string secret;       // "": FERRY_SECRET
  std::string bind;         // "": FERRY_RENDEZVOUS_BIND (127.0.0.1)
  // Replaces FERRY_TIMEOUT as the default deadline (set_default_timeout); 0: FERRY_TIMEOUT.
  std::chrono::milliseconds timeout{0};
};

// The world Group. Idempotent: later calls return the same group (their options are then
// ignored). Throws InvalidArgument for an unknown FERRY_BACKEND or a bad option (naming it),
// TransportError for a backend that is not available.
Group init();
Group init(const InitOptions& options);


// The backend init() chose ("mpi", "ucx", "local"), or "" before init().
std::string backend_name();

// Ends what init() started: MPI_Finalize if ferry initialized MPI. After a rank failed, hung or
// timed out, under MPICH's mpiexec, MPI_Finalize is skipped on every rank (it would wait for the
// hung one) and mpiexec is told that the rank ends on purpose, so finalize returns or raises;
// under another MPI launcher it still runs, under a 10 s watchdog that ends the process should it
// wait (docs/lifecycle.md).
// Call it after every Work completed and before exit; Groups must not be used afterwards.
// If it is not called, it runs at exit (so a rank that returns from main early does not make
// mpiexec kill the ranks still finishing). Idempotent.
void finalize();

}  // namespace ferry
