// Which launcher started this process, and what it says about the job: rank, world size, local
// rank and where rank 0 can be reached. ferry::init() and the TCP rendezvous read it, so a
// trainer started by torchrun or srun needs no FERRY_* variable beyond FERRY_SECRET.
//
// The first launcher whose variables are set wins:
//   ferry     FERRY_RANK, FERRY_WORLD_SIZE; rank 0 at FERRY_RENDEZVOUS (ferry-run sets them)
//   torchrun  RANK, WORLD_SIZE, LOCAL_RANK; rank 0 at MASTER_ADDR:MASTER_PORT, or at
//             MASTER_PORT + 1 when TORCHELASTIC_USE_AGENT_STORE is true (torchrun's agent then
//             holds MASTER_PORT with its own store)
//   slurm     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; rank 0 at MASTER_ADDR (else the first
//             host of SLURM_STEP_NODELIST, else of SLURM_JOB_NODELIST) and MASTER_PORT: SLURM
//             itself names no port
//   mpi       PMI_RANK / PMI_SIZE (Hydra), OMPI_COMM_WORLD_RANK / _SIZE (Open MPI); no address:
//             MPI carries the bootstrap
// A variable that is set but malformed (RANK=x, a rank not below the size) throws
// InvalidArgument naming it.
#pragma once

#include <functional>
#include <string>

namespace ferry {

struct LaunchEnvironment {
  std::string launcher;  // "ferry", "torchrun", "slurm", "mpi"; "" when none (one process)
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // the rank among the processes of this host (LOCAL_RANK, SLURM_LOCALID)
  std::string host;    // rank 0's address for the TCP rendezvous; "" when not known
  int port = 0;        // 0 when not known
  // "torchrun: rank 1 of 4 (local 1), rank 0 at node1:29500".
  std::string describe() const;
};

// Read from this process's environment at each call.
LaunchEnvironment launch_environment();

namespace detail {
// The same from `get` (a getenv), for tests.
LaunchEnvironment read_launch_environment(const std::function<const char*(const char*)>& get);
// The first host of a SLURM node list: "node[03-05,9]" -> "node03", "a1,b2" -> "a1".
std::string first_slurm_host(const std::string& nodelist);
}  // namespace detail

}  // namespace ferry
