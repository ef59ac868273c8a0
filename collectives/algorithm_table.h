// Which algorithm carries each collective: the dispatch of every raw collective.
//
// Every collective asks the table when it is issued, from what every rank agrees on (the op,
// the payload size, the group size, whether the transport has collectives of its own, whether
// the group's ranks all share one host), so all ranks run the same algorithm. Processes that
// share one host (not the local transport's threads) first take the shared-memory path where
// it was measured faster, by op and size.
// Otherwise, on a transport with its own collectives (MPI) the automatic choice is one of the
// transport's three ways, by size and group size: a persistent request for small ops, rounds
// of its point-to-point messages posted at once in groups of 2-4 ranks, else its non-blocking
// collective call; elsewhere (local, UCX) it is one of the engine's point-to-point algorithms,
// also by size and group size.
//
// FERRY_ALGO="all_reduce:ring,all_gather:direct" (or set_algorithm_override) gives a collective
// one algorithm instead: a point-to-point algorithm runs on any transport (over MPI's
// point-to-point messages too); the transport's own ways only where it has collectives, which
// the world group checks when it is made (at init); shm only for ranks on one host. The
// override is parsed once, into enums: the path that issues an op compares no strings. The
// table is printable (ferry-info, and FERRY_DEBUG=info at init).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ferry {

enum class Collective : uint8_t {
  AllReduce, Reduce, ReduceScatter, AllGather, AllToAll, Broadcast, Gather, Scatter, Barrier
};
inline constexpr size_t kCollectiveCount = 9;
const char* collective_name(Collective c);  // "all_reduce", ...

enum class Algorithm : uint8_t {
  Native,             // the transport's own non-blocking collective call (MPI_Iallreduce, ...)
  Ring,               // bandwidth-optimal: W-1 steps of 1/W of the payload
  Tree,               // binomial tree: log2 W rounds
  RecursiveDoubling,  // log2 W exchange rounds of the whole payload
  Direct,             // every rank sends to every rank at once: one round
  Pairwise,           // all_to_all: at step s rank r sends to r+s, receives from r-s
  Linear,             // the root talks to every rank
  Dissemination,      // barrier: ceil(log2 W) rounds of empty messages
  // The transport's two faster ways (MPI; backends/mpi/mpi_persistent.h, mpi_exchange.h). An op
  // a way cannot take (too large, a group size or a form it lacks, its 64 persistent requests
  // made, switched off by FERRY_MPI_PERSISTENT / FERRY_MPI_EXCHANGE) falls to the next of
  // persistent, exchange, native; the op records the one it took.
  Persistent,         // a persistent request per call shape, staged through its own buffers
  Exchange,           // one or two rounds of point-to-point messages, posted when issued
  // Through memory shared by the group's ranks (collectives/shm/): only for a group whose ranks
  // all run on one host (learnt at init; never on the local transport, whose ranks are threads
  // of one process), on any transport. Spelled "shm".
  SharedMemory,
  // all_reduce for ranks on several hosts: a ring reduce-scatter inside each host, an all_reduce
  // of each slice among one rank per host, a ring all_gather inside each host, over point-to-point
  // messages on any transport (collectives/algorithms/hierarchical.cpp). Forced where the hosts
  // are unknown or each holds one rank, it is the ring or the one all_reduce across the hosts.
  // reduce_scatter and all_gather: each block crosses between two hosts once, to one rank of the
  // receiving host, which sums or hands it on inside its host (hierarchical_blocks.cpp); forced
  // on one host, one round of messages inside it.
  Hierarchical,
};
inline constexpr size_t kAlgorithmCount = 12;

// Where a group's ranks run, as the table reads it (from the host keys exchanged at init).
enum class Placement : uint8_t {
  Unknown,       // not learnt: the local transport, a world made outside init
  OneHost,       // every rank on one host: the shared-memory rows apply
  ApartHosts,    // several hosts, each holding one of the ranks
  SharedHosts,   // several hosts, some holding several of the ranks: the hierarchical rows apply
};
struct HostLayout;
// The placement of the ranks `layout` describes (Group::host_layout).
Placement placement_of(const HostLayout& layout);
const char* algorithm_name(Algorithm a);  // "native", "ring", "recursive_doubling", ...

// Whether `a` is one of the transport's own ways (Native, Persistent, Exchange), which only a
// transport with collectives of its own has.
constexpr bool uses_native_collectives(Algorithm a) {
  return a == Algorithm::Native || a == Algorithm::Persistent || a == Algorithm::Exchange;
}

// The algorithms FERRY_ALGO accepts for `c`: the transport's own ways first (Native, then
// Persistent and Exchange where `c` has them), then the point-to-point ones.
const std::vector<Algorithm>& algorithms_for(Collective c);

// The algorithm that carries `c` moving `bytes` (per rank's input) among `world_size` ranks, on
// a transport that has (`native`) or has not collectives of its own, for a group whose ranks
// run where `placement` says: the override if one is set, else the automatic rule. Throws
// InvalidArgument when the override is one of the transport's own ways and the transport has
// none, when it is shm and the ranks are not on one host, or when FERRY_ALGO does not parse.
Algorithm choose_algorithm(Collective c, size_t bytes, int world_size, bool native,
                           Placement placement);
// The same for a group whose ranks all share one host (`one_host`) or whose hosts are unknown.
inline Algorithm choose_algorithm(Collective c, size_t bytes, int world_size, bool native,
                                  bool one_host = false) {
  return choose_algorithm(c, bytes, world_size, native,
                          one_host ? Placement::OneHost : Placement::Unknown);
}

// The automatic rule alone, the override set aside, for a group whose ranks are not all on one
// host and not spread over shared hosts: what an op takes where the algorithm chosen cannot
// carry it (shm above its slots), and the hierarchical all_reduce's choice among the hosts.
Algorithm automatic_algorithm(Collective c, size_t bytes, int world_size, bool native);

// Same syntax as FERRY_ALGO; an empty string restores the automatic choice. Throws
// InvalidArgument for an unknown collective, or an algorithm the collective does not have
// (naming the collective, what was given and the valid choices); a refused spec changes nothing.
void set_algorithm_override(const std::string& spec);

namespace detail {
// Parses FERRY_ALGO now unless set_algorithm_override replaced it: init() calls it with the other
// settings, so that a bad spec is refused before anything starts. Throws InvalidArgument.
void load_algorithm_overrides();
// Refuses (InvalidArgument) an override of the transport's own ways when the world's transport
// (`transport`, for the message) has no collectives of its own: Group::world calls it, so
// FERRY_ALGO=all_reduce:native under the local transport stops init rather than the first op.
void check_algorithm_overrides(bool native, const std::string& transport);
}  // namespace detail

// A human-readable table: per collective, its algorithms, the automatic choice by size and
// group size with and without collectives of the transport's own, and the override in force.
std::string algorithm_table();

}  // namespace ferry
