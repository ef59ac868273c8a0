#include <ferry/collectives/torchrec/planner/sharding_plan.h>

#include <ferry/collectives/torchrec/utils/format.h>
#include <ferry/collectives/torchrec/utils/topology.h>
#include <ferry/runtime/error.h>

#include <algorithm>

namespace ferry::torchrec {

namespace {

std::vector<int> node_ranks(int host_index, const TableShape& t, int world_size, int local_size) {
  FERRY_CHECK(local_size >= 1 && world_size % local_size == 0, InvalidArgument,
              "torchrec plan: table '", t.name, "': local size ", local_size,
              " does not divide world size ", world_size);
  const int nodes = world_size / local_size;
  FERRY_CHECK(host_index >= 0 && host_index < nodes, InvalidArgument, "torchrec plan: table '",
              t.name, "': host index ", host_index, " outside [0, ", nodes, ") (world ",
              world_size, ", local size ", local_size, ")");
  std::vector<int> r(static_cast<size_t>(local_size));
  for (int j = 0; j < local_size; ++j) r[static_cast<size_t>(j)] = host_index * local_size + j;
  return r;
}

// The int overload's local size when none is given: the launcher's, else torchrec's default of
// 8 -- refused where it would split the world into nodes of 8, which on ferry's CPU ranks is a
// guess about hosts nobody made (a plan keeping tables on "nodes" that are not hosts would send
// their traffic across hosts while pricing it as inside one).
int assumed_local_size(int world_size, const std::string& module_path) {
  const bool guess = !launcher_local_size() && world_size > kDefaultLocalSize &&
                     world_size % kDefaultLocalSize == 0;
  FERRY_CHECK(!guess, InvalidArgument, "torchrec construct_module_sharding_plan: module '",
              module_path, "': no local size was given and no launcher variable says one "
              "(LOCAL_WORLD_SIZE, MPI_LOCALNRANKS, ...), so torchrec's default of ",
              kDefaultLocalSize, " ranks per node (its GPUs per host) would split the ",
              world_size, " ranks into ", world_size / kDefaultLocalSize, " nodes, which says "
              "nothing about where CPU ranks run: pass the local size (ranks per host), or the "
              "Group, whose overload takes the job's hosts");
  return get_local_size(world_size);
}

}  // namespace

std::vector<int64_t> even_column_widths(int64_t dim, int n) {
  FERRY_CHECK(n >= 1 && n <= dim, InvalidArgument, "torchrec plan: cannot split ", dim,
              " columns into ", n, " non-empty shards");
  // Balanced: the first dim % n shards one column wider, so there are always n shards.
  std::vector<int64_t> widths(static_cast<size_t>(n), dim / n);
  for (int64_t j = 0; j < dim % n; ++j) ++widths[static_cast<size_t>(j)];
  return widths;
}

ParameterSharding make_row_blocks(ShardingType type, const TableShape& table,
                                  const std::vector<int>& ranks, EmbeddingComputeKernel kernel) {
  ParameterSharding p{type, kernel, ranks, {}};
  const int64_t n = static_cast<int64_t>(ranks.size());
  const int64_t b = (table.rows + n - 1) / n;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t start = std::min(j * b, table.rows);
    p.sharding_spec.push_back(
        {{start, 0}, {std::min(b, table.rows - start), table.dim}, ranks[static_cast<size_t>(j)]});
  }
  return p;
}

ParameterSharding make_column_shards(ShardingType type, const TableShape& table,
                                     const std::vector<int64_t>& widths,
                                     const std::vector<int>& ranks, EmbeddingComputeKernel kernel) {
  FERRY_CHECK(widths.size() == ranks.size(), InvalidArgument, "torchrec plan: table '", table.name,
              "': ", widths.size(), " column widths for ", ranks.size(), " ranks");
  ParameterSharding p{type, kernel, ranks, {}};
  int64_t c = 0;
  for (size_t j = 0; j < widths.size(); ++j) {
    p.sharding_spec.push_back({{0, c}, {table.rows, widths[j]}, ranks[j]});
    c += widths[j];
  }
  return p;
}

ParameterShardingGenerator data_parallel() {
  return [](const TableShape&, int world_size, int) {
    ParameterSharding p{ShardingType::DATA_PARALLEL, EmbeddingComputeKernel::DENSE, {}, {}};
    for (int r = 0; r < world_size; ++r) p.ranks.push_back(r);
    return p;
  };
}

ParameterShardingGenerator table_wise(int rank, EmbeddingComputeKernel kernel) {
  return [rank, kernel](const TableShape& t, int, int) {
    return ParameterSharding{ShardingType::TABLE_WISE, kernel, {rank}, {{{0, 0}, {t.rows, t.dim}, rank}}};
  };
}

ParameterShardingGenerator row_wise(EmbeddingComputeKernel kernel) {
  return [kernel](const TableShape& t, int world_size, int) {
    std::vector<int> ranks;
    for (int r = 0; r < world_size; ++r) ranks.push_back(r);
    return make_row_blocks(ShardingType::ROW_WISE, t, ranks, kernel);
  };
}

ParameterShardingGenerator table_row_wise(int host_index, EmbeddingComputeKernel kernel) {
  return [host_index, kernel](const TableShape& t, int world_size, int local_size) {
    return make_row_blocks(ShardingType::TABLE_ROW_WISE, t,
                           node_ranks(host_index, t, world_size, local_size), kernel);
  };
}

ParameterShardingGenerator column_wise(std::vector<int> ranks, EmbeddingComputeKernel kernel) {
  return [ranks, kernel](const TableShape& t, int, int) {
    FERRY_CHECK(!ranks.empty() && static_cast<int64_t>(ranks.size()) <= t.dim, InvalidArgument,
                "torchrec plan: table '", t.name, "': column_wise over ", ranks.size(),
                " ranks needs 1 to ", t.dim, " (its dim) ranks");
    return make_column_shards(ShardingType::COLUMN_WISE, t,
                              even_column_widths(t.dim, static_cast<int>(ranks.size())), ranks,
                              kernel);
  };
}

ParameterShardingGenerator table_column_wise(int host_index, EmbeddingComputeKernel kernel) {
  return [host_index, kernel](const TableShape& t, int world_size, int local_size) {
    std::vector<int> ranks = node_ranks(host_index, t, world_size, local_size);
    if (static_cast<int64_t>(ranks.size()) > t.dim) ranks.resize(static_cast<size_t>(t.dim));
    return make_column_shards(ShardingType::TABLE_COLUMN_WISE, t,
                              even_column_widths(t.dim, static_cast<int>(ranks.size())), ranks,
                              kernel);
  };
}

ModuleShardingPlan construct_module_sharding_plan(
    const std::vector<TableShape>& tables,
    const std::map<std::string, ParameterShardingGenerator>& generators, int world_size,
    int local_size, const std::string& module_path) {
  if (local_size == 0) local_size = assumed_local_size(world_size, module_path);
  ModuleShardingPlan plan;
  for (const auto& t : tables) {
    auto it = generators.find(t.name);
    FERRY_CHECK(it != generators.end(), InvalidArgument, "torchrec plan: module '", module_path,
                "', table '", t.name, "' has no sharding given");
    plan[t.name] = it->second(t, world_size, local_size);
  }
  for (const auto& [name, gen] : generators)
    FERRY_CHECK(plan.count(name) == 1, InvalidArgument, "torchrec plan: module '", module_path,
                "': a sharding is given for table '", name, "', which the module does not have");
  validate_module_plan(plan, tables, world_size, local_size, module_path);
  return plan;
}

ModuleShardingPlan construct_module_sharding_plan(
    const std::vector<TableShape>& tables,
    const std::map<std::string, ParameterShardingGenerator>& generators, const Group& group,
    const std::string& module_path) {
  detail::check_group(group, "torchrec construct_module_sharding_plan");
  return construct_module_sharding_plan(tables, generators, group.size(), get_local_size(group),
                                        module_path);
}

}  // namespace ferry::torchrec
