// A plan as a text table, in the spirit of torchrec's planner stats output: one row per table
// (module, table, sharding type, compute kernel, ranks, rows x dim, memory on each rank holding a
// shard, estimated cost on those ranks), then one row per rank (memory used against the budget,
// estimated cost per step, bytes communicated, values looked up, shards held) and the balance
// (max and mean estimated cost). Costs come from estimate_plan (cost_model.h), so a hand-written
// plan prints the same way as a generated one. The planner logs this table under
// FERRY_DEBUG=info (subsystem "torchrec"); the string is the caller's to print.
//
// Example (W = 2, L = 2, batch 512 per rank, budget 64 MiB):
//
//   torchrec sharding plan: 2 ranks, 2 per node, batch 512 per rank, budget 64.0 MiB per rank
//   module | table  | sharding      | kernel | ranks | rows x dim  | memory per rank | cost per rank (ms)
//   -------+--------+---------------+--------+-------+-------------+-----------------+-------------------
//          | t_big  | row_wise      | fused  | 0,1   | 100000 x 64 | 12.2 MiB each   | 0.0367 each
//          | t_ad   | data_parallel | dense  | 0,1   | 100 x 16    | 6.2 KiB each    | 0.000...
//   ...
//   rank | memory used | budget   | used  | cost (ms) | comm (MiB) | lookup (M values) | shards
//   -----+-------------+----------+-------+-----------+------------+-------------------+-------
//      0 | 12.2 MiB    | 64.0 MiB | 19.1% | 0.0412    | 1.27       | 0.655             | 2
//   ...
//   estimated cost per step: max 0.0412 ms (rank 0), mean 0.0409 ms, max/mean 1.007
#pragma once

#include "collectives/torchrec/planner/cost_model.h"
#include "collectives/torchrec/planner/sharding_plan.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ferry::torchrec {

// The table above. Throws InvalidArgument when the plan names a table `modules` does not describe.
std::string format_plan(const ShardingPlan& plan,
                        const std::map<std::string, std::vector<PlannerTable>>& modules,
                        const Topology& topology);

// "512 B", "6.2 KiB", "12.2 MiB", "1.50 GiB" (binary units, 3 significant digits).
std::string format_bytes(int64_t bytes);

}  // namespace ferry::torchrec
