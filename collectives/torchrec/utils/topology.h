// torchrec's process-group topology helpers (torchrec.distributed.comm): how many ranks share a
// node, which one this is, and the intra-node and cross-node groups that the table-row-wise
// sharding communicates over.
//
// The launcher tells each process its node-local layout through the environment. Each value is
// the first non-negative integer among these variables, in this order:
//
//   local size: LOCAL_WORLD_SIZE (torchrun), MPI_LOCALNRANKS (MPICH's Hydra, checked with
//               mpiexec 4.0 here), OMPI_COMM_WORLD_LOCAL_SIZE (Open MPI),
//               MV2_COMM_WORLD_LOCAL_SIZE (MVAPICH2)
//   local rank: LOCAL_RANK, MPI_LOCALRANKID (Hydra), OMPI_COMM_WORLD_LOCAL_RANK,
//               MV2_COMM_WORLD_LOCAL_RANK
//
// A variable that is set but is not an integer (or a local size of 0, which torchrec would
// divide by) raises InvalidArgument naming the variable and its value: the original stops with
// a Python error there. Negative values are skipped, as in the original. The variables are read
// on every call (getenv): a program must not change them while other threads call these.
//
// Ranks here are ranks of the group the caller has in mind (the world group, in torchrec); the
// original's default arguments (dist.get_world_size(), dist.get_rank()) are the Group overloads.
//
// The Group overloads know where the ranks run when the job does: on the MPI and UCX
// transports every rank learnt at init which ranks share its host (Group::host_layout, from the
// host keys the ranks exchange), and they answer from that, launcher or not: local size = ranks
// on a host, local rank = index among them, group rank = the host's index (hosts numbered by
// their first rank), number of groups = hosts. On the world group, a launcher variable that is
// set must agree with it (InvalidArgument naming the variable, its value and the job's layout
// otherwise: the launcher put the ranks elsewhere than it says). Hosts holding different
// numbers of ranks (3 + 1), or ranks not consecutive on a host, are handled by get_local_rank,
// get_group_rank, get_num_groups and intra_and_cross_node_pg; get_local_size, whose single
// value the sharding types take to mean "host g holds ranks g*L .. g*L+L-1", refuses them with
// InvalidArgument (the same on every rank). On the local transport (ranks are threads of one
// process) and in the int overloads, which see no group, the launcher variables and the
// default below are used as described above.
#pragma once

#include <ferry/collectives/group.h>

#include <optional>
#include <utility>

namespace ferry::torchrec {

// The local size when no launcher variable is set (torchrec's default: 8 GPUs per host). ferry's
// ranks run on CPUs, where 8 says nothing about a host: the int overloads below keep it only for
// parity with torchrec (its own helpers answer the same), and a plan written through
// construct_module_sharding_plan's int overload refuses it where it would split the world into
// several nodes (sharding_plan.h). The Group overloads take the job's hosts instead.
inline constexpr int kDefaultLocalSize = 8;

// The launcher's ranks per node: the first local-size variable above that is set and
// non-negative, with its name, or nullopt when none is. Throws InvalidArgument for a malformed
// variable or a value of 0.
std::optional<std::pair<int, const char*>> launcher_local_size();

// Ranks per node for a world of `world_size` (>= 1) ranks: the launcher's value, else 8. When
// that does not divide world_size, world_size (one node), logged under FERRY_DEBUG=info
// (subsystem "torchrec"). Throws InvalidArgument for world_size < 1 or a malformed variable.
int get_local_size(int world_size);
// This rank's index on its node: the launcher's value unless missing or >= get_local_size,
// then rank % local size. Throws InvalidArgument unless 0 <= rank < world_size.
int get_local_rank(int world_size, int rank);
// The node (group of local_size consecutive ranks) this rank is on: rank / local size.
int get_group_rank(int world_size, int rank);
// The number of nodes: world_size / local size.
int get_num_groups(int world_size);

// The same on a group's size and this rank's group rank (the original's defaults).
int get_local_size(const Group& world);
int get_local_rank(const Group& world);
int get_group_rank(const Group& world);
int get_num_groups(const Group& world);

// This rank's (intra-node, cross-node) groups over `world` (any group; group ranks are used),
// with L = local_size; when local_size is 0, by the job's hosts where it knows them (one intra
// group per host, one cross group per local rank: uneven hosts too), else
// L = get_local_size(world.size()):
//   intra groups: ranks [g*L, g*L+1, ..., g*L+L-1] for each node g (group rank = local rank)
//   cross groups: ranks [l, l+L, l+2L, ...] for each local rank l (group rank = node index)
// An explicit local_size must be >= 1 and divide world.size() (InvalidArgument otherwise: no
// silent fallback for a value the caller chose).
//
// Collective over `world` the first time: every member must call it, in the same order relative
// to other collectives on `world` (two Group::split calls). Later calls with the same world
// group and the same L return the same two Groups without communicating. The cache key is the
// world group's identity (its shared state, not its numeric id, which repeats across local
// worlds) plus L; a different L (changed environment, explicit value) is a new key and so
// creates a new pair collectively, leaving the earlier pair cached and valid. Entries of world
// groups that no longer exist are dropped at the next call; the rest live until exit.
// A null `world` (a rank outside it) gives two null Groups, as torchrec's meta device gives
// (None, None).
//
// torchrec's 2-D variant (intra_and_cross_node_pg_2D) builds this structure inside each
// sharding group: call this function on the sharding group, with the local size that applies
// inside it.
std::pair<Group, Group> intra_and_cross_node_pg(const Group& world, int local_size = 0);

}  // namespace ferry::torchrec
