// Checking that every rank holds the same plan, and handing one rank's plan to all: a plan must be
// identical on every rank, and that is checked once, collectively, at sharding time. The sharded
// modules call check_plan_agreement once when they are built.
#pragma once

#include <ferry/collectives/group.h>
#include <ferry/collectives/torchrec/planner/types.h>

#include <cstdint>

namespace ferry::torchrec {

// A 64-bit FNV-1a hash of plan.to_string(): equal plans give equal fingerprints on every rank and
// build; different plans differ with overwhelming probability.
uint64_t plan_fingerprint(const ShardingPlan& plan);

// Collective over `group` (every member calls it, in the same order relative to other collectives
// on the group): all_gather of the members' fingerprints. When they all agree, returns. Otherwise
// every member throws the same MismatchError: the reference plan is the one most members hold
// (ties: the lowest rank's), and the message names each member whose plan differs from it, and
// for the first of them the first table where the two differ with both descriptions, e.g.
//   "torchrec plan: the plans differ across ranks: ranks [2] differ from rank 0's plan (held by
//    ranks [0,1,3]); rank 2: module '', table 't1': rank 0 has 'table_wise fused ranks [0] ...',
//    rank 2 has 'row_wise fused ranks [0,1,2,3] ...'"
// The texts for that are exchanged only on a mismatch (a second, all_gather_v, collective that
// every member runs since all saw the same fingerprints). Throws InvalidArgument for a null group.
void check_plan_agreement(const ShardingPlan& plan, const Group& group);

// torchrec's collective_plan: `plan` as `source` (a group rank) has it, on every member (the
// others' argument is ignored), by invoke_on_rank_and_broadcast_result. For a plan computed on one
// rank; a deterministic planner run on every rank gives the same plan without it.
ShardingPlan broadcast_plan(const ShardingPlan& plan, const Group& group, int source = 0);

}  // namespace ferry::torchrec
