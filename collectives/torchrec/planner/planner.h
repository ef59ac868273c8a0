// Generating a plan (torchrec's EmbeddingShardingPlanner with its greedy proposer and partitioner,
// reduced to one deterministic greedy pass over the cost model of cost_model.h).
//
//   Topology topo;
//   topo.world_size = 4; topo.local_world_size = 2; topo.batch_size = 512;
//   topo.memory_budget = 1ll << 30;
//   EmbeddingShardingPlanner planner(topo);
//   std::vector<PlannerTable> tables{{"t_user", 1'000'000, 64, 20.0}, {"t_ad", 1000, 16, 1.0}};
//   ShardingPlan plan = planner.plan(tables, "sparse.ebc");
//   std::cout << format_plan(plan, {{"sparse.ebc", tables}}, topo);     // plan_printer.h
//
// The algorithm:
//  1. Candidates per table, in this order (only the allowed sharding types, ParameterConstraints):
//     data_parallel; table_wise on rank 0..W-1; column_wise (shards of min_partition columns, the
//     last short, when that gives >= 2 shards or column_wise is the only type allowed);
//     table_column_wise on node 0..W/L-1 (the same shards inside that node); row_wise;
//     table_row_wise on node 0..W/L-1. Compute kernel: dense for data_parallel (it must be
//     allowed), otherwise fused if allowed, else dense, else the first allowed kernel.
//  2. Tables largest first: by memory of the whole table (with optimizer state), then by the
//     smallest total cost of their candidates, then module path, then name.
//  3. Each table takes, among its candidates that fit every rank's remaining memory, the one that
//     minimises  max( max_r load_r ,  (sum_r load_r + lower bound of the tables still to place) / W )
//     after placing it (load = estimated seconds per step; the lower bound is each remaining
//     table's cheapest total cost over all ranks): the bottleneck rank and the average work the
//     plan will at least have. Ties (relative 1e-9): the smaller per-rank load vector sorted in
//     decreasing order (so equal candidates go to the least-loaded rank), then the earlier
//     candidate. Column shards are placed one by one onto the rank (of the world, or of the node)
//     with the least load after taking it that still has room, lowest rank on ties.
//  4. No candidate fits: InvalidArgument naming the module and table, its size, the smallest
//     per-rank footprint among its allowed placements, and the largest remaining capacity (rank
//     and bytes) with the budget.
// Same inputs give the same plan on every rank (no randomness, ordered containers, a fixed order
// of floating-point operations), so ranks may each run the planner; collective_plan runs it on
// rank 0 and broadcasts instead.
#pragma once

#include <ferry/collectives/group.h>
#include <ferry/collectives/torchrec/planner/cost_model.h>
#include <ferry/collectives/torchrec/planner/types.h>

#include <map>
#include <string>
#include <vector>

namespace ferry::torchrec {

class EmbeddingShardingPlanner {
 public:
  // Throws InvalidArgument for an invalid topology (Topology::validate).
  explicit EmbeddingShardingPlanner(Topology topology);

  // One module's tables (table names unique, rows and dim >= 1, pooling factor >= 0,
  // num_features >= 1, constraints that leave at least one candidate). The returned plan is
  // validated (validate_plan) and holds one module at `module_path`.
  ShardingPlan plan(const std::vector<PlannerTable>& tables,
                    const std::string& module_path = "") const;
  // Several modules sharing the ranks' memory and load (module path -> tables).
  ShardingPlan plan(const std::map<std::string, std::vector<PlannerTable>>& modules) const;

  // plan() on group rank 0, broadcast to every member (collective over `group`; a failure on
  // rank 0 is raised on every member, see invoke_on_rank_and_broadcast_result). The topology's
  // world_size must be the group's size (InvalidArgument on every member otherwise). Its nodes
  // and bandwidths are the caller's: for the job's own, local_world_size from get_local_size(group)
  // (the hosts) and the bandwidths from measure_host_bandwidths(group) (host_bandwidth.h).
  ShardingPlan collective_plan(const std::map<std::string, std::vector<PlannerTable>>& modules,
                               const Group& group) const;

  const Topology& topology() const { return topology_; }

 private:
  Topology topology_;
};

}  // namespace ferry::torchrec
