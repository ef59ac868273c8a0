// Which algorithm carries each collective: the dispatch of every raw collective.
//
// Every collective asks the table when it is issued, from what every rank agrees on (the op,
// the payload size, the group size, whether the transport has collectives of its own), so all
// ranks run the same algorithm. On a transport with its own collectives (MPI) the automatic
// choice is Native for every collective; elsewhere (local, UCX) it is a point-to-point
// algorithm picked by size and group size. FERRY_ALGO="all_reduce:ring,all_gather:direct" (or
// set_algorithm_override) gives a collective one algorithm instead, on any transport: a
// point-to-point algorithm then runs over MPI's point-to-point messages too. The spec is parsed
// once, into enums; the issue path compares no strings. The table is printable (ferry-info
// --algorithms, and FERRY_DEBUG=info at init).
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
  Native,             // the transport's own collective (MPI's non-blocking calls and fast paths)
  Ring,               // bandwidth-optimal: W-1 steps of 1/W of the payload
  Tree,               // binomial tree: log2 W rounds
  RecursiveDoubling,  // log2 W exchange rounds of the whole payload
  Direct,             // every rank sends to every rank at once: one round
  Pairwise,           // all_to_all: at step s rank r sends to r+s, receives from r-s
  Linear,             // the root talks to every rank
  Dissemination,      // barrier: ceil(log2 W) rounds of empty messages
};
inline constexpr size_t kAlgorithmCount = 8;
const char* algorithm_name(Algorithm a);  // "native", "ring", "recursive_doubling", ...

// The algorithms FERRY_ALGO accepts for `c`: Native first (valid only on a transport with its
// own collectives), then the point-to-point ones, the first of them the fallback.
const std::vector<Algorithm>& algorithms_for(Collective c);

// The algorithm that carries `c` moving `bytes` (per rank's input) among `world_size` ranks, on
// a transport that has (`native`) or has not collectives of its own: the override if one is
// set, else the automatic rule. Throws InvalidArgument when the override is Native and the
// transport has none, or when FERRY_ALGO does not parse.
Algorithm choose_algorithm(Collective c, size_t bytes, int world_size, bool native);

// Same syntax as FERRY_ALGO; an empty string restores the automatic choice. Throws
// InvalidArgument for an unknown collective, or an algorithm the collective does not have
// (naming the collective, what was given and the valid choices); a refused spec changes nothing.
void set_algorithm_override(const std::string& spec);

namespace detail {
// Parses FERRY_ALGO now unless set_algorithm_override replaced it: init() calls it with the other
// settings, so that a bad spec is refused before anything starts. Throws InvalidArgument.
void load_algorithm_overrides();
}  // namespace detail

// A human-readable table: per collective, its algorithms, the automatic choice by size and
// group size (and on a transport with its own collectives), and the override in force.
std::string algorithm_table();

}  // namespace ferry
