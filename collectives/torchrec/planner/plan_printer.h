// A plan as a text table, in the spirit of torchrec's planner stats output: one row per table
// (module, table, sharding type, compute kernel, ranks, rows x dim, memory on each rank holding a
// shard, estimated cost on those ranks), then one row per rank (memory used against the budget,
// estimated cost per step, bytes communicated, values looked up, shards held), the balance
// (max and mean estimated cost), the bytes that cross nodes in a step with the bandwidths the
// bytes were priced at, and a line saying what the estimate covers. Tables are listed
// in natural order (t_2 before t_10). Costs come from estimate_plan (cost_model.h), so a hand-written
// plan prints the same way as a generated one. The planner logs this table under
// FERRY_DEBUG=info (subsystem "torchrec"); the string is the caller's to print.
//
// Example (W = 4, L = 2, batch 512 per rank, budget 200 MB, Adagrad state; trimmed):
//
//   torchrec sharding plan: 4 ranks, 2 per node, batch 512 per rank, budget 191 MiB per rank
//   module     | table   | sharding      | kernel | ranks   | rows x dim   | memory per rank | cost per rank (ms)
//   -----------+---------+---------------+--------+---------+--------------+-----------------+-------------------
//   sparse.ebc | country | data_parallel | dense  | 0,1,2,3 | 200 x 16     | 25.0 KiB each   | 0.00635 each
//   sparse.ebc | user    | row_wise      | fused  | 0,1,2,3 | 1000000 x 64 | 122 MiB each    | 0.443 each
//
//   rank | memory used | budget  | used  | cost (ms) | comm (MiB) | lookup (M values) | shards
//   -----+-------------+---------+-------+-----------+------------+-------------------+-------
//   0    | 186 MiB     | 191 MiB | 97.6% | 1.31      | 9.35       | 1.32              | 5
//   ...
//   estimated cost per step: max 1.31 ms (rank 0), mean 1.31 ms, max/mean 1
//   cross-node traffic per step: 37.4 MiB (sent plus received, summed over the ranks; rank 0 9.35 MiB), priced at 12.5 GB/s across nodes and 100 GB/s inside one
//   (a cost model of the embedding tables' communication and lookups, for ranking placements: not a step-time prediction)
#pragma once

#include <ferry/collectives/torchrec/planner/cost_model.h>
#include <ferry/collectives/torchrec/planner/types.h>

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
// "1.10 GB/s", "850 MB/s" (decimal units, as links are rated; 3 significant digits).
std::string format_bandwidth(double bytes_per_second);

}  // namespace ferry::torchrec
