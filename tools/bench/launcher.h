// How ferry-bench starts its ranks and how they agree on numbers outside the timed region.
//
// make_launcher is the one place a transport is chosen: `local` runs the ranks as threads of
// this process; `mpi` and `ucx` run one rank per process under mpiexec, with a RankSync on raw
// MPI calls over a communicator of its own (so the exchanges never touch the runtime under
// test).
#pragma once

#include <ferry/ferry.h>
#include "tools/bench/ops.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ferry::bench {

// Exchanges between the ranks of one benchmark that are not what is measured. Every member of
// the group must make the same calls in the same order (like a collective).
class RankSync {
 public:
  virtual ~RankSync() = default;
  // The elementwise maximum over ranks of `mine` (the same length on every rank), on every
  // rank, so every rank derives the same iteration count from it.
  virtual std::vector<double> max_over_ranks(const std::vector<double>& mine) = 0;
  // True on every rank when every rank passed true.
  virtual bool all_of(bool mine) = 0;
};

// The same op at the same size through the transport's own raw call (--vs-mpi: the blocking MPI
// call), with its own buffers, timed next to ferry's in the same run.
class Baseline {
 public:
  virtual ~Baseline() = default;
  virtual void barrier() = 0;  // the baseline's own barrier, before each timed iteration
  virtual void run() = 0;      // one call, returns when this rank's part is complete
};

// The body of a benchmark on one rank.
using RankFn = std::function<void(Group& world, RankSync& sync)>;

class Launcher {
 public:
  virtual ~Launcher() = default;
  // Runs `fn` on every rank and returns when all finished; rethrows the first rank's error.
  virtual void run(const RankFn& fn) = 0;
  virtual int world_size() const = 0;
  // Whether this process prints the header and the table (one process of an MPI job does).
  virtual bool reports() const { return true; }
  // The status the process will end with, for a launcher that may have to end it itself (MPI's,
  // when MPI_Finalize does not return). Until told, it assumes a failure.
  virtual void set_exit_status(int status) { (void)status; }
  // The baseline for --vs-mpi on the calling rank, or null when the transport has none.
  // `nonblocking`: MPI_I<op> + MPI_Wait instead of the blocking call.
  virtual std::unique_ptr<Baseline> baseline(OpKind op, int64_t count, DType dtype,
                                             bool nonblocking) {
    (void)op;
    (void)count;
    (void)dtype;
    (void)nonblocking;
    return nullptr;
  }
};

// Throws UsageError for an unknown transport or one this build cannot run. `world_size` is the
// --world-size flag, for local; an MPI job's size is mpiexec's.
std::unique_ptr<Launcher> make_launcher(const std::string& transport, int world_size);

// The launcher of a job started by mpiexec (mpi_launcher.cpp; no_mpi_launcher.cpp without MPI).
// `transport` carries ferry's collectives: "mpi", or "ucx" (UCX point-to-point under ferry's
// algorithms, its worker addresses exchanged through MPI). Either way MPI runs the rank
// exchanges and the --vs-mpi baseline on a communicator of its own.
std::unique_ptr<Launcher> make_mpi_launcher(const std::string& transport);

// The UCX transport of this job, its addresses exchanged by `all_gather` (ucx_world.cpp;
// no_ucx_world.cpp throws UsageError without UCX).
std::shared_ptr<Transport> make_ucx_world(
    int rank, int size,
    const std::function<std::vector<std::string>(const std::string&)>& all_gather);

// Transports ferry-bench knows about, built in or not, for messages.
const std::vector<std::string>& known_transports();

}  // namespace ferry::bench
