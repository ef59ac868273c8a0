// Writing a plan by hand (torchrec.distributed.sharding_plan's construct_module_sharding_plan and
// its per-type generators, in ferry's own form).
//
//   ModuleShardingPlan plan = construct_module_sharding_plan(
//       tables,                                     // std::vector<TableShape>
//       {{"t_small", data_parallel()},
//        {"t_user", table_wise(1)},
//        {"t_item", row_wise()},
//        {"t_wide", column_wise({0, 1})},
//        {"t_big", table_row_wise(0)}},
//       world_size, local_size);
//
// A generator turns a table's shape and the world into the ParameterSharding of its type (the
// shard layout of types.h); construct_module_sharding_plan validates the result, so a
// generator that cannot apply (a rank outside the world, more column shards than columns) raises
// InvalidArgument naming the table.
#pragma once

#include <ferry/collectives/group.h>
#include <ferry/collectives/torchrec/planner/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ferry::torchrec {

using ParameterShardingGenerator =
    std::function<ParameterSharding(const TableShape& table, int world_size, int local_size)>;

// The whole table on every rank; dense kernel.
ParameterShardingGenerator data_parallel();
// The whole table on `rank`.
ParameterShardingGenerator table_wise(int rank,
                                      EmbeddingComputeKernel kernel = EmbeddingComputeKernel::FUSED);
// W row blocks of ceil(R/W) rows, block j on rank j.
ParameterShardingGenerator row_wise(EmbeddingComputeKernel kernel = EmbeddingComputeKernel::FUSED);
// L row blocks of ceil(R/L) rows over the ranks of node `host_index`.
ParameterShardingGenerator table_row_wise(
    int host_index, EmbeddingComputeKernel kernel = EmbeddingComputeKernel::FUSED);
// Columns split into n = ranks.size() contiguous shards (n <= D) of even widths
// (even_column_widths), shard j on ranks[j].
ParameterShardingGenerator column_wise(std::vector<int> ranks,
                                       EmbeddingComputeKernel kernel = EmbeddingComputeKernel::FUSED);
// Columns split as column_wise over the L ranks of node `host_index` (n = min(L, D) shards, on the
// node's first n ranks).
ParameterShardingGenerator table_column_wise(
    int host_index, EmbeddingComputeKernel kernel = EmbeddingComputeKernel::FUSED);

// The layouts behind the generators, for code that already knows the ranks (the planner).
ParameterSharding make_row_blocks(ShardingType type, const TableShape& table,
                                  const std::vector<int>& ranks, EmbeddingComputeKernel kernel);
// Columns split at the given widths (sum = D), shard j on ranks[j].
ParameterSharding make_column_shards(ShardingType type, const TableShape& table,
                                     const std::vector<int64_t>& widths,
                                     const std::vector<int>& ranks, EmbeddingComputeKernel kernel);
// n widths summing to D, the first D % n of them floor(D/n) + 1, the rest floor(D/n)
// (n in [1, D]): 10 columns on 4 ranks are 3,3,2,2.
std::vector<int64_t> even_column_widths(int64_t dim, int n);

// One module's plan: generators[t.name] applied to each table, validated as a whole
// (validate_module_plan). A generator for a table the module does not have, or a table without a
// generator, raises InvalidArgument.
//
// local_size 0: this overload sees no group, so it cannot know where the ranks run; it assumes
// what torchrec's does, the launcher's variable (get_local_size(world_size): LOCAL_WORLD_SIZE,
// MPI_LOCALNRANKS, ...), else torchrec's 8 ranks per node (its GPUs per host), else one node.
// Where no variable is set and 8 would split the world into several nodes (16, 24, ... ranks), it
// raises InvalidArgument instead: ferry's ranks run on CPUs, where 8 is no count of anything,
// and a plan built on it would keep tables inside "nodes" that may span hosts. Give the local
// size, or use the Group overload below.
ModuleShardingPlan construct_module_sharding_plan(
    const std::vector<TableShape>& tables,
    const std::map<std::string, ParameterShardingGenerator>& generators, int world_size,
    int local_size = 0, const std::string& module_path = "");
// The same over `group`'s ranks, with its hosts as the nodes: world size group.size(), local
// size get_local_size(group), which answers from Group::host_layout() when the job knows its
// hosts (MPI, UCX; hosts of different sizes, or whose ranks are not consecutive, are refused
// with InvalidArgument, as torchrec's nodes need L consecutive ranks each) and from the
// launcher's variable or torchrec's default on the local transport, as the sharded modules
// built on `group` do (so the plan and the modules agree on the nodes).
ModuleShardingPlan construct_module_sharding_plan(
    const std::vector<TableShape>& tables,
    const std::map<std::string, ParameterShardingGenerator>& generators, const Group& group,
    const std::string& module_path = "");

}  // namespace ferry::torchrec
