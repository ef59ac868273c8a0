// Which algorithm carries each collective on transports without native collectives.
//
// The choice depends on the op, the payload size and the world size, and can be overridden with
// FERRY_ALGO="all_reduce:ring,all_gather:direct" (or set_algorithm_override). The table is
// printable so a user can see what ran (FERRY_DEBUG=info prints it at init).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ferry {

enum class Collective {
  AllReduce, Reduce, ReduceScatter, AllGather, AllToAll, Broadcast, Gather, Scatter, Barrier
};
const char* collective_name(Collective c);  // "all_reduce", ...

// Algorithms that can carry `c` (the first is the fallback).
const std::vector<std::string>& algorithms_for(Collective c);
// The algorithm used for `c` moving `bytes` (per rank's input) among `world_size` ranks.
std::string choose_algorithm(Collective c, size_t bytes, int world_size);
// Same syntax as FERRY_ALGO; an empty string restores the automatic choice. Throws
// InvalidArgument for an unknown collective or algorithm.
void set_algorithm_override(const std::string& spec);
// A human-readable table: every collective, its algorithms, the automatic rule, overrides.
std::string algorithm_table();

}  // namespace ferry
