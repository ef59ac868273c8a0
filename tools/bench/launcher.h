// How ferry-bench starts its ranks and how they agree on numbers outside the timed region.
//
// make_launcher is the one place a transport is chosen: `local` runs the ranks as threads of
// this process; `mpi` and `ucx` will run one rank per process under mpiexec, with a RankSync
// built on collectives instead of shared memory.
#pragma once

#include "ferry.h"

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

// The body of a benchmark on one rank.
using RankFn = std::function<void(Group& world, RankSync& sync)>;

class Launcher {
 public:
  virtual ~Launcher() = default;
  // Runs `fn` on every rank and returns when all finished; rethrows the first rank's error.
  virtual void run(const RankFn& fn) = 0;
};

// Throws UsageError for an unknown transport or one this build cannot run.
std::unique_ptr<Launcher> make_launcher(const std::string& transport, int world_size);

// Transports ferry-bench knows about, built in or not, for messages.
const std::vector<std::string>& known_transports();

}  // namespace ferry::bench
