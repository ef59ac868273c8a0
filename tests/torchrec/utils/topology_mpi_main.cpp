// The torchrec topology helpers and collective utils under mpiexec (MPICH's Hydra), on the mpi
// transport (or whichever FERRY_BACKEND asks for):
//
//  1. Hydra's MPI_LOCALNRANKS / MPI_LOCALRANKID are set and read. On one host they agree with
//     the fallbacks for the job's own world size, so the local size is also asked for a world
//     of 2W ranks: only the variable gives W there (the default 8 does not divide 2W for W = 2
//     or 3, so the fallback would give 2W).
//  2. intra_and_cross_node_pg over the world: one node, cross groups of one rank.
//  3. invoke_on_rank_and_broadcast_result from the last rank, on the world and on a reversed
//     sub-group (group rank 0 = world rank W-1), with a string and a user-serialized result.
//
// The launcher variables of other launchers that take precedence (LOCAL_WORLD_SIZE,
// LOCAL_RANK) are removed first, in case the caller's environment has them. Exit status 0 when
// every check passed on every rank.
#include "tests/mpi/job_checks.h"
#include <ferry/collectives/torchrec/torchrec.h>
#include <ferry/ferry.h>

#include <cstdlib>
#include <string>

int main() {
  ::unsetenv("LOCAL_WORLD_SIZE");
  ::unsetenv("LOCAL_RANK");
  using namespace ferry;
  using namespace ferry::torchrec;
  ftest_mpi::Checks c;
  bool ok = false;
  {
    Group world = init();
    const int W = world.size(), me = world.rank();
    const char* nranks = std::getenv("MPI_LOCALNRANKS");
    const char* rankid = std::getenv("MPI_LOCALRANKID");
    c.expect(nranks != nullptr && std::to_string(W) == nranks,
             "Hydra sets MPI_LOCALNRANKS to the number of ranks on this host");
    c.expect(rankid != nullptr && std::to_string(me) == rankid,
             "Hydra sets MPI_LOCALRANKID to the rank on this host");
    c.expect(get_local_size(world) == W, "get_local_size(world) == W");
    c.expect(get_local_rank(world) == me, "get_local_rank(world) == rank");
    c.expect(get_num_groups(world) == 1, "one node");
    // Only MPI_LOCALNRANKS makes the local size of a 2W-rank world W (the default 8 does not
    // divide 2W for W = 2, 3 and would fall back to 2W).
    c.expect(get_local_size(2 * W) == W, "get_local_size(2W) == W from MPI_LOCALNRANKS");
    c.expect(get_group_rank(2 * W, W + me) == 1, "rank W + me is on the second node");

    auto [intra, cross] = intra_and_cross_node_pg(world);
    c.expect(intra.valid() && intra.size() == W && intra.rank() == me, "intra = the world");
    c.expect(cross.valid() && cross.size() == 1, "cross groups of one rank");

    const std::string s = invoke_on_rank_and_broadcast_result(
        world, W - 1, [&] { return "from " + std::to_string(me); });
    c.expect(s == "from " + std::to_string(W - 1), "string from the last rank");
    Group reverse = world.split(0, -me);
    const std::vector<int> v = invoke_on_rank_and_broadcast_result(
        reverse, 0, [&] { return std::vector<int>{me, 7}; });
    c.expect(v == std::vector<int>{W - 1, 7}, "group rank 0 of the reversed group is world W-1");
    bool failed_everywhere = false;
    try {
      invoke_on_rank_and_broadcast_result(reverse, 1, []() -> int {
        throw InvalidArgument("refused");
      });
    } catch (const InvalidArgument& e) {
      failed_everywhere = std::string(e.what()).find("refused") != std::string::npos;
    }
    c.expect(failed_everywhere, "a failure of the source reaches every rank");
    ok = ftest_mpi::every_rank_passed(c, world, "torchrec-topology");
  }
  finalize();
  return ok ? 0 : 1;
}
