#include <ferry/collectives/torchrec/planner/plan_printer.h>

#include <algorithm>
#include <cstdio>
#include <set>

namespace ferry::torchrec {

namespace {

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::string percent(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f%%", v);
  return buf;
}

// "x each" when every value is the same text, else "a,b,c".
std::string compact(const std::vector<std::string>& values) {
  if (values.empty()) return "-";
  if (std::all_of(values.begin(), values.end(), [&](const std::string& v) { return v == values[0]; }))
    return values.size() == 1 ? values[0] : values[0] + " each";
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) s += ',';
    s += values[i];
  }
  return s;
}

// "t_2" before "t_10": digit runs compare as numbers, the rest as text.
bool natural_less(const std::string& a, const std::string& b) {
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t i_end = i, j_end = j;
      while (i_end < a.size() && digit(a[i_end])) ++i_end;
      while (j_end < b.size() && digit(b[j_end])) ++j_end;
      // Leading zeros aside, the longer run is the larger number.
      size_t i_nz = i, j_nz = j;
      while (i_nz + 1 < i_end && a[i_nz] == '0') ++i_nz;
      while (j_nz + 1 < j_end && b[j_nz] == '0') ++j_nz;
      if (i_end - i_nz != j_end - j_nz) return i_end - i_nz < j_end - j_nz;
      const int c = a.compare(i_nz, i_end - i_nz, b, j_nz, j_end - j_nz);
      if (c != 0) return c < 0;
      if (i_end - i != j_end - j) return i_end - i < j_end - j;  // "t_01" after "t_1"
      i = i_end;
      j = j_end;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i;
    ++j;
  }
  return a.size() - i < b.size() - j;
}

// Rows of cells as an aligned text table with a rule under the header row.
std::string render(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], row[c].size());
    }
  std::string out;
  for (size_t i = 0; i < rows.size(); ++i) {
    std::string line;
    for (size_t c = 0; c < rows[i].size(); ++c) {
      if (c) line += " | ";
      line += rows[i][c];
      if (c + 1 < rows[i].size()) line += std::string(width[c] - rows[i][c].size(), ' ');
    }
    out += line + "\n";
    if (i == 0) {
      std::string rule;
      for (size_t c = 0; c < width.size(); ++c)
        {
        if (c) rule += "-+-";
        rule.append(width[c], '-');
      }
      out += rule + "\n";
    }
  }
  return out;
}

// The bandwidths the plan's bytes were priced at, and the bytes that cross nodes in a step:
// what a plan for several hosts is chosen by.
std::string traffic_line(const PlanEstimate& est, const Topology& t) {
  if (t.world_size == t.local_world_size)
    return "one node: no byte crosses nodes (intra-node bandwidth " +
           format_bandwidth(t.intra_node_bandwidth) + ")\n";
  double total = 0;
  size_t busiest = 0;
  for (size_t r = 0; r < est.rank_totals.size(); ++r) {
    total += est.rank_totals[r].cross_bytes;
    if (est.rank_totals[r].cross_bytes > est.rank_totals[busiest].cross_bytes) busiest = r;
  }
  return "cross-node traffic per step: " + format_bytes(static_cast<int64_t>(total)) +
         " (sent plus received, summed over the ranks; rank " + std::to_string(busiest) + " " +
         format_bytes(static_cast<int64_t>(est.rank_totals[busiest].cross_bytes)) +
         "), priced at " + format_bandwidth(t.cross_node_bandwidth) + " across nodes and " +
         format_bandwidth(t.intra_node_bandwidth) + " inside one\n";
}

}  // namespace

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int u = -1;
  while (v >= 1024 && u < 3) v /= 1024, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, v >= 100 ? "%.0f %s" : v >= 10 ? "%.1f %s" : "%.2f %s", v,
                units[u]);
  return buf;
}

std::string format_bandwidth(double bytes_per_second) {
  const char* units[] = {"B/s", "kB/s", "MB/s", "GB/s", "TB/s"};
  double v = bytes_per_second;
  int u = 0;
  while (v >= 1000 && u < 4) v /= 1000, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, v >= 100 ? "%.0f %s" : v >= 10 ? "%.1f %s" : "%.2f %s", v,
                units[u]);
  return buf;
}

std::string format_plan(const ShardingPlan& plan,
                        const std::map<std::string, std::vector<PlannerTable>>& modules,
                        const Topology& topology) {
  const PlanEstimate est = estimate_plan(plan, modules, topology);
  const int W = topology.world_size;
  std::string out = "torchrec sharding plan: " + std::to_string(W) + " ranks, " +
                    std::to_string(topology.local_world_size) + " per node, batch " +
                    std::to_string(topology.batch_size) + " per rank, budget " +
                    format_bytes(topology.memory_budget) + " per rank\n";

  std::vector<std::vector<std::string>> rows = {{"module", "table", "sharding", "kernel", "ranks",
                                                 "rows x dim", "memory per rank",
                                                 "cost per rank (ms)"}};
  std::vector<int> shards(static_cast<size_t>(W), 0);
  size_t e = 0;
  for (const auto& [path, tables] : plan.plan()) {
    for (const auto& [name, sharding] : tables) {
      const auto& entry = est.tables[e++];
      // A named capture: clang 14 cannot capture a structured binding.
      const auto& desc =
          *std::find_if(modules.at(path).begin(), modules.at(path).end(),
                        [&name = name](const PlannerTable& t) { return t.name == name; });
      // The ranks holding a shard, in rank order.
      std::set<int> holders;
      for (int r = 0; r < W; ++r)
        if (!sharding.shards_on_rank(r, desc.shape()).empty()) holders.insert(r);
      std::vector<std::string> ranks, memory, cost;
      for (int r : holders) {
        ranks.push_back(std::to_string(r));
        memory.push_back(format_bytes(entry.per_rank[static_cast<size_t>(r)].memory_bytes));
        cost.push_back(number(entry.per_rank[static_cast<size_t>(r)].seconds * 1e3));
        shards[static_cast<size_t>(r)] +=
            static_cast<int>(sharding.shards_on_rank(r, desc.shape()).size());
      }
      std::string rank_list;
      for (size_t i = 0; i < ranks.size(); ++i) {
        if (i) rank_list += ',';
        rank_list += ranks[i];
      }
      rows.push_back({path, name, std::string(to_string(sharding.sharding_type)),
                      std::string(to_string(sharding.compute_kernel)), rank_list,
                      std::to_string(desc.rows) + " x " + std::to_string(desc.dim),
                      compact(memory), compact(cost)});
    }
  }
  // Tables in their natural order (t_1, t_2, ..., t_10), not the plan's text order.
  std::stable_sort(rows.begin() + 1, rows.end(),
                   [](const std::vector<std::string>& a, const std::vector<std::string>& b) {
                     if (a[0] != b[0]) return natural_less(a[0], b[0]);
                     return natural_less(a[1], b[1]);
                   });
  out += render(rows) + "\n";

  std::vector<std::vector<std::string>> summary = {{"rank", "memory used", "budget", "used",
                                                    "cost (ms)", "comm (MiB)",
                                                    "lookup (M values)", "shards"}};
  int max_rank = 0;
  for (int r = 0; r < W; ++r) {
    const RankCost& c = est.rank_totals[static_cast<size_t>(r)];
    if (c.seconds > est.rank_totals[static_cast<size_t>(max_rank)].seconds) max_rank = r;
    summary.push_back({std::to_string(r), format_bytes(c.memory_bytes),
                       format_bytes(topology.memory_budget),
                       percent(100.0 * static_cast<double>(c.memory_bytes) /
                               static_cast<double>(topology.memory_budget)),
                       number(c.seconds * 1e3), number(c.comm_bytes() / (1024.0 * 1024.0)),
                       number(c.lookup_values / 1e6), std::to_string(shards[static_cast<size_t>(r)])});
  }
  out += render(summary);
  const double mean = est.mean_seconds();
  out += "estimated cost per step: max " + number(est.max_seconds() * 1e3) + " ms (rank " +
         std::to_string(max_rank) + "), mean " + number(mean * 1e3) + " ms, max/mean " +
         (mean > 0 ? number(est.max_seconds() / mean) : std::string("-")) + "\n";
  out += traffic_line(est, topology);
  // The figures above are the cost model's, not a forecast of the step a trainer measures.
  // (cost_model.h: bytes at assumed bandwidths plus lookups; no dense part, no waiting.)
  out += "(a cost model of the embedding tables' communication and lookups, for ranking "
         "placements: not a step-time prediction)\n";
  return out;
}

}  // namespace ferry::torchrec
