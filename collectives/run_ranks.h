// Runs a function on N ranks of a fresh local world, one thread per rank.
//
// The first failure (in time) is rethrown after every rank finished, with "rank r: " in front of
// its message and its type kept. A failing rank is declared dead to the others, so a rank
// blocked on it fails with PeerFailure instead of waiting for its deadline.
#pragma once

#include <ferry/collectives/group.h>

#include <functional>

namespace ferry {

void run_ranks(int n, const std::function<void(Group& world)>& fn);

}  // namespace ferry
