#include <ferry/collectives/torchrec/planner/planner.h>

#include <ferry/collectives/torchrec/comm/collective_utils.h>
#include <ferry/collectives/torchrec/planner/plan_printer.h>
#include <ferry/collectives/torchrec/planner/sharding_plan.h>
#include <ferry/collectives/torchrec/utils/format.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>

namespace ferry::torchrec {

namespace {

constexpr double kRelTol = 1e-9;

// a < b beyond rounding noise.
bool less(double a, double b) { return a < b - kRelTol * std::max(std::abs(a), std::abs(b)); }

bool allowed(const std::vector<ShardingType>& types, ShardingType t) {
  return types.empty() || std::find(types.begin(), types.end(), t) != types.end();
}

bool kernel_allowed(const std::vector<EmbeddingComputeKernel>& kernels, EmbeddingComputeKernel k) {
  if (kernels.empty())
    return k == EmbeddingComputeKernel::DENSE || k == EmbeddingComputeKernel::FUSED;
  return std::find(kernels.begin(), kernels.end(), k) != kernels.end();
}

// One way to place a table; column shards get their ranks when it is evaluated.
struct Candidate {
  ShardingType type;
  EmbeddingComputeKernel kernel;
  std::vector<int> ranks;        // table_wise {k}; row blocks: their ranks; columns: the pool
  std::vector<int64_t> widths;   // column shards
};

struct Pending {
  const std::string* module;
  const PlannerTable* table;
  std::vector<Candidate> candidates;
  int64_t full_memory = 0;
  double min_total = 0;           // cheapest total seconds over all ranks
  int64_t min_footprint = 0;      // smallest per-rank memory over the candidates
};

std::vector<int> range(int first, int count) {
  std::vector<int> v;
  for (int r = first; r < first + count; ++r) v.push_back(r);
  return v;
}

void check_table(const PlannerTable& t, const std::string& module) {
  auto where = [&] { return "torchrec planner: module '" + module + "', table '" + t.name + "': "; };
  FERRY_CHECK(!t.name.empty(), InvalidArgument, "torchrec planner: module '", module,
              "' has a table with an empty name");
  FERRY_CHECK(t.rows >= 1 && t.dim >= 1, InvalidArgument, where(), "rows ", t.rows, " and dim ",
              t.dim, " must be >= 1");
  FERRY_CHECK(std::isfinite(t.pooling_factor) && t.pooling_factor >= 0, InvalidArgument, where(),
              "pooling factor ", t.pooling_factor, " must be finite and >= 0");
  FERRY_CHECK(t.num_features >= 1, InvalidArgument, where(), "num_features ", t.num_features,
              " must be >= 1");
  FERRY_CHECK(t.constraints.min_partition >= 0, InvalidArgument, where(), "min_partition ",
              t.constraints.min_partition, " must be >= 0");
}

std::vector<Candidate> candidates_of(const PlannerTable& t, const Topology& topo,
                                     const std::string& module) {
  const auto& c = t.constraints;
  const int W = topo.world_size;
  const int L = topo.local_world_size;
  const int nodes = W / L;
  std::optional<EmbeddingComputeKernel> sparse_kernel;
  for (auto k : {EmbeddingComputeKernel::FUSED, EmbeddingComputeKernel::DENSE})
    if (!sparse_kernel && kernel_allowed(c.compute_kernels, k)) sparse_kernel = k;
  if (!sparse_kernel && !c.compute_kernels.empty()) sparse_kernel = c.compute_kernels.front();

  std::vector<Candidate> out;
  if (allowed(c.sharding_types, ShardingType::DATA_PARALLEL) &&
      kernel_allowed(c.compute_kernels, EmbeddingComputeKernel::DENSE))
    out.push_back({ShardingType::DATA_PARALLEL, EmbeddingComputeKernel::DENSE, range(0, W), {}});
  if (sparse_kernel) {
    const auto k = *sparse_kernel;
    if (allowed(c.sharding_types, ShardingType::TABLE_WISE))
      for (int r = 0; r < W; ++r) out.push_back({ShardingType::TABLE_WISE, k, {r}, {}});
    const int64_t mp = c.min_partition > 0 ? c.min_partition : topo.default_min_partition;
    std::vector<int64_t> widths;
    for (int64_t col = 0; col < t.dim; col += mp) widths.push_back(std::min(mp, t.dim - col));
    const bool only_columns =
        !c.sharding_types.empty() &&
        std::all_of(c.sharding_types.begin(), c.sharding_types.end(), [](ShardingType s) {
          return s == ShardingType::COLUMN_WISE || s == ShardingType::TABLE_COLUMN_WISE;
        });
    if (widths.size() >= 2 || only_columns) {
      if (allowed(c.sharding_types, ShardingType::COLUMN_WISE))
        out.push_back({ShardingType::COLUMN_WISE, k, range(0, W), widths});
      if (allowed(c.sharding_types, ShardingType::TABLE_COLUMN_WISE))
        for (int h = 0; h < nodes; ++h)
          out.push_back({ShardingType::TABLE_COLUMN_WISE, k, range(h * L, L), widths});
    }
    if (allowed(c.sharding_types, ShardingType::ROW_WISE))
      out.push_back({ShardingType::ROW_WISE, k, range(0, W), {}});
    if (allowed(c.sharding_types, ShardingType::TABLE_ROW_WISE))
      for (int h = 0; h < nodes; ++h)
        out.push_back({ShardingType::TABLE_ROW_WISE, k, range(h * L, L), {}});
  }
  FERRY_CHECK(!out.empty(), InvalidArgument, "torchrec planner: module '", module, "', table '",
              t.name, "': its constraints leave no sharding to choose (data_parallel needs the "
              "dense kernel, the other types need some compute kernel)");
  return out;
}

// The ParameterSharding of a candidate given the ranks' current loads and memory, or nullopt when
// a column shard finds no rank with room. budget < 0: no memory limit.
std::optional<ParameterSharding> realize(const Candidate& c, const PlannerTable& t,
                                         const Topology& topo, const std::vector<double>& load,
                                         const std::vector<int64_t>& memory, int64_t budget) {
  const TableShape shape = t.shape();
  switch (c.type) {
    case ShardingType::DATA_PARALLEL:
      return ParameterSharding{c.type, c.kernel, c.ranks, {}};
    case ShardingType::TABLE_WISE:
      return ParameterSharding{c.type, c.kernel, c.ranks, {{{0, 0}, {t.rows, t.dim}, c.ranks[0]}}};
    case ShardingType::ROW_WISE:
    case ShardingType::TABLE_ROW_WISE:
      return make_row_blocks(c.type, shape, c.ranks, c.kernel);
    case ShardingType::COLUMN_WISE:
    case ShardingType::TABLE_COLUMN_WISE: {
      std::vector<double> l = load;
      std::vector<int64_t> m = memory;
      std::vector<int> owners;
      for (int64_t w : c.widths) {
        const int64_t bytes = shard_memory_bytes(t.rows, w, topo);
        // The owner's cost of this shard: the same on every rank, so only its size matters.
        ParameterSharding one{c.type, c.kernel, {c.ranks[0]}, {{{0, 0}, {t.rows, w}, c.ranks[0]}}};
        const double inc = estimate_table_cost(one, t, topo)[static_cast<size_t>(c.ranks[0])].seconds;
        int best = -1;
        for (int r : c.ranks) {
          const auto ri = static_cast<size_t>(r);
          if (budget >= 0 && m[ri] + bytes > budget) continue;
          if (best < 0 || less(l[ri], l[static_cast<size_t>(best)])) best = r;
        }
        if (best < 0) return std::nullopt;
        l[static_cast<size_t>(best)] += inc;
        m[static_cast<size_t>(best)] += bytes;
        owners.push_back(best);
      }
      return make_column_shards(c.type, shape, c.widths, owners, c.kernel);
    }
  }
  return std::nullopt;
}

// Lexicographic comparison of two load vectors sorted in decreasing order.
bool sorted_less(std::vector<double> a, std::vector<double> b) {
  std::sort(a.rbegin(), a.rend());
  std::sort(b.rbegin(), b.rend());
  for (size_t i = 0; i < a.size(); ++i) {
    if (less(a[i], b[i])) return true;
    if (less(b[i], a[i])) return false;
  }
  return false;
}

std::string bytes_text(int64_t b) { return std::to_string(b) + " bytes (" + format_bytes(b) + ")"; }

// Every module's tables with their candidate shardings, costed on an empty machine, largest
// first; the rest of the key makes the order total, hence the same on every rank.
std::vector<Pending> pending_tables(const std::map<std::string, std::vector<PlannerTable>>& modules,
                                    const Topology& topo) {
  const std::vector<double> zero_load(static_cast<size_t>(topo.world_size), 0.0);
  const std::vector<int64_t> zero_mem(static_cast<size_t>(topo.world_size), 0);
  std::vector<Pending> work;
  for (const auto& [path, tables] : modules) {
    std::set<std::string> names;
    for (const auto& t : tables) {
      check_table(t, path);
      FERRY_CHECK(names.insert(t.name).second, InvalidArgument, "torchrec planner: module '", path,
                  "' lists table '", t.name, "' twice");
      Pending w{&path, &t, candidates_of(t, topo, path), shard_memory_bytes(t.rows, t.dim, topo),
             std::numeric_limits<double>::infinity(), std::numeric_limits<int64_t>::max()};
      for (const auto& c : w.candidates) {
        const auto s = realize(c, t, topo, zero_load, zero_mem, -1);
        const auto cost = estimate_table_cost(*s, t, topo);
        double total = 0;
        int64_t footprint = 0;
        for (const auto& rc : cost) total += rc.seconds, footprint = std::max(footprint, rc.memory_bytes);
        w.min_total = std::min(w.min_total, total);
        w.min_footprint = std::min(w.min_footprint, footprint);
      }
      work.push_back(std::move(w));
    }
  }
  std::sort(work.begin(), work.end(), [](const Pending& a, const Pending& b) {
    if (a.full_memory != b.full_memory) return a.full_memory > b.full_memory;
    if (a.min_total != b.min_total) return a.min_total > b.min_total;
    if (*a.module != *b.module) return *a.module < *b.module;
    return a.table->name < b.table->name;
  });
  return work;
}

// The chosen sharding of one table, its cost per rank and the ranks' loads after it.
struct Placement {
  std::optional<ParameterSharding> sharding;
  std::vector<RankCost> cost;
  double score = 0;
  std::vector<double> load;
};

// The candidate of `w` that fits the memory left and gives the lowest bound on the final
// makespan (the busiest rank, or the average once the tables after it -- `remaining_lb` seconds
// at least -- are spread evenly); ties go to the more even load. No sharding when none fits.
Placement best_placement(const Pending& w, double remaining_lb, const std::vector<double>& load,
                         const std::vector<int64_t>& memory, const Topology& topo) {
  const PlannerTable& t = *w.table;
  Placement best;
  for (const auto& c : w.candidates) {
    auto s = realize(c, t, topo, load, memory, topo.memory_budget);
    if (!s) continue;
    auto cost = estimate_table_cost(*s, t, topo);
    bool fits = true;
    std::vector<double> next = load;
    double mx = 0, sum = 0;
    for (size_t r = 0; r < cost.size(); ++r) {
      if (memory[r] + cost[r].memory_bytes > topo.memory_budget) fits = false;
      next[r] += cost[r].seconds;
      mx = std::max(mx, next[r]);
      sum += next[r];
    }
    if (!fits) continue;
    const double score = std::max(mx, (sum + remaining_lb) / topo.world_size);
    const bool better = !best.sharding || less(score, best.score) ||
                        (!less(best.score, score) && sorted_less(next, best.load));
    if (better) best = {std::move(s), std::move(cost), score, std::move(next)};
  }
  return best;
}

// InvalidArgument: table `w` fits on no rank; `placed` tables of `total` were placed.
[[noreturn]] void raise_does_not_fit(const Pending& w, const std::vector<int64_t>& memory,
                                     const Topology& topo, size_t placed, size_t total) {
  const PlannerTable& t = *w.table;
  int cap_rank = 0;
  for (int r = 1; r < topo.world_size; ++r)
    if (memory[static_cast<size_t>(r)] < memory[static_cast<size_t>(cap_rank)]) cap_rank = r;
  FERRY_THROW(InvalidArgument, "torchrec planner: module '", *w.module, "', table '", t.name,
              "' (", t.rows, " rows x ", t.dim, " dim, ", bytes_text(w.full_memory),
              " with optimizer state) does not fit: its smallest per-rank footprint among the "
              "allowed shardings is ", bytes_text(w.min_footprint),
              ", the largest remaining capacity is ",
              bytes_text(topo.memory_budget - memory[static_cast<size_t>(cap_rank)]),
              " on rank ", cap_rank, " (budget ", bytes_text(topo.memory_budget), " per rank, ",
              placed, " of ", total, " tables placed)");
}

}  // namespace

EmbeddingShardingPlanner::EmbeddingShardingPlanner(Topology topology)
    : topology_(std::move(topology)) {
  topology_.validate();
}

ShardingPlan EmbeddingShardingPlanner::plan(const std::vector<PlannerTable>& tables,
                                            const std::string& module_path) const {
  return plan(std::map<std::string, std::vector<PlannerTable>>{{module_path, tables}});
}

ShardingPlan EmbeddingShardingPlanner::plan(
    const std::map<std::string, std::vector<PlannerTable>>& modules) const {
  const Topology& topo = topology_;
  const int W = topo.world_size;
  const std::vector<Pending> work = pending_tables(modules, topo);
  std::vector<double> remaining_lb(work.size() + 1, 0.0);  // sum of min_total of tables [k+1, n)
  for (size_t k = work.size(); k-- > 0;) remaining_lb[k] = remaining_lb[k + 1] + work[k].min_total;

  // Greedy, largest table first: each goes where it raises the bound on the makespan least.
  std::vector<double> load(static_cast<size_t>(W), 0.0);
  std::vector<int64_t> memory(static_cast<size_t>(W), 0);
  std::map<std::string, ModuleShardingPlan> result;
  for (const auto& [path, tables] : modules) result[path];
  for (size_t k = 0; k < work.size(); ++k) {
    const Pending& w = work[k];
    Placement best = best_placement(w, remaining_lb[k + 1], load, memory, topo);
    if (!best.sharding) raise_does_not_fit(w, memory, topo, k, work.size());
    for (size_t r = 0; r < best.cost.size(); ++r) memory[r] += best.cost[r].memory_bytes;
    load = std::move(best.load);
    result[*w.module][w.table->name] = std::move(*best.sharding);
  }

  ShardingPlan plan(std::move(result));
  std::map<std::string, std::vector<TableShape>> shapes;
  for (const auto& [path, tables] : modules)
    for (const auto& t : tables) shapes[path].push_back(t.shape());
  validate_plan(plan, shapes, W, topo.local_world_size);
  if (log_enabled(LogLevel::Info, "torchrec"))
    log_line(LogLevel::Info, "torchrec", "planner:\n" + format_plan(plan, modules, topo));
  return plan;
}

ShardingPlan EmbeddingShardingPlanner::collective_plan(
    const std::map<std::string, std::vector<PlannerTable>>& modules, const Group& group) const {
  detail::check_group(group, "torchrec EmbeddingShardingPlanner::collective_plan");
  // Checked on every rank before the broadcast, so that all refuse alike and none waits.
  FERRY_CHECK(group.size() == topology_.world_size, InvalidArgument,
              detail::where("torchrec EmbeddingShardingPlanner::collective_plan", group),
              ": the topology's world_size is ", topology_.world_size, ", the group has ",
              group.size(), " ranks");
  return invoke_on_rank_and_broadcast_result(group, 0, [&] { return plan(modules); });
}

}  // namespace ferry::torchrec
