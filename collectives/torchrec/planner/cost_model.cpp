#include <ferry/collectives/torchrec/planner/cost_model.h>

#include <ferry/runtime/error.h>

#include <algorithm>
#include <cmath>

namespace ferry::torchrec {

void Topology::validate() const {
  auto bad = [](const char* field, auto value, const char* need) {
    FERRY_THROW(InvalidArgument, "torchrec planner: Topology::", field, " = ", value, " (", need,
                ")");
  };
  if (world_size < 1) bad("world_size", world_size, "need >= 1");
  if (local_world_size < 1 || world_size % local_world_size != 0)
    bad("local_world_size", local_world_size, "need >= 1 and dividing world_size");
  if (batch_size < 1) bad("batch_size", batch_size, "need >= 1");
  if (memory_budget <= 0) bad("memory_budget", memory_budget, "need > 0 bytes per rank");
  if (!(element_bytes > 0)) bad("element_bytes", element_bytes, "need > 0");
  if (!(id_bytes > 0)) bad("id_bytes", id_bytes, "need > 0");
  if (!(optimizer_state_per_element >= 0))
    bad("optimizer_state_per_element", optimizer_state_per_element, "need >= 0");
  if (!(optimizer_state_per_row >= 0))
    bad("optimizer_state_per_row", optimizer_state_per_row, "need >= 0");
  if (!(intra_node_bandwidth > 0)) bad("intra_node_bandwidth", intra_node_bandwidth, "need > 0");
  if (!(cross_node_bandwidth > 0)) bad("cross_node_bandwidth", cross_node_bandwidth, "need > 0");
  if (!(lookup_bandwidth > 0)) bad("lookup_bandwidth", lookup_bandwidth, "need > 0");
  if (!(backward_lookup_factor >= 0))
    bad("backward_lookup_factor", backward_lookup_factor, "need >= 0");
  if (default_min_partition < 1) bad("default_min_partition", default_min_partition, "need >= 1");
}

RankCost& RankCost::operator+=(const RankCost& o) {
  memory_bytes += o.memory_bytes;
  intra_bytes += o.intra_bytes;
  cross_bytes += o.cross_bytes;
  lookup_values += o.lookup_values;
  seconds += o.seconds;
  return *this;
}

int64_t shard_memory_bytes(int64_t rows, int64_t cols, const Topology& t) {
  const double bytes = static_cast<double>(rows) * static_cast<double>(cols) * t.element_bytes *
                           (1.0 + t.optimizer_state_per_element) +
                       static_cast<double>(rows) * t.optimizer_state_per_row * t.element_bytes;
  return static_cast<int64_t>(std::ceil(bytes));
}

std::vector<RankCost> estimate_table_cost(const ParameterSharding& sharding,
                                          const PlannerTable& table, const Topology& t) {
  const int W = t.world_size;
  const int L = t.local_world_size;
  const bool multi_node = W > L;
  const double B = static_cast<double>(t.batch_size);
  const double G = B * W;
  const double f = table.num_features;
  const double p = table.pooling_factor;
  const double R = static_cast<double>(table.rows);
  const double D = static_cast<double>(table.dim);
  const double e = t.element_bytes;
  const double i = t.id_bytes;
  std::vector<RankCost> cost(static_cast<size_t>(W));
  // A world-wide exchange is cross-node when there is more than one node.
  auto world_bytes = [&](RankCost& c, double bytes) {
    (multi_node ? c.cross_bytes : c.intra_bytes) += bytes;
  };
  auto at = [&](int r) -> RankCost& { return cost.at(static_cast<size_t>(r)); };

  switch (sharding.sharding_type) {
    case ShardingType::DATA_PARALLEL:
      for (int r = 0; r < W; ++r) {
        at(r).memory_bytes = shard_memory_bytes(table.rows, table.dim, t);
        world_bytes(at(r), 4.0 * (W - 1) / W * R * D * e);
        at(r).lookup_values = B * f * p * D;
      }
      break;
    case ShardingType::TABLE_WISE:
    case ShardingType::COLUMN_WISE:
    case ShardingType::TABLE_COLUMN_WISE: {
      const double n = static_cast<double>(sharding.sharding_spec.size());
      for (int r = 0; r < W; ++r) world_bytes(at(r), B * f * p * i * n + 2 * B * f * D * e);
      for (const auto& s : sharding.sharding_spec) {
        RankCost& c = at(s.placement);
        const double d = static_cast<double>(s.cols());
        c.memory_bytes += shard_memory_bytes(s.rows(), s.cols(), t);
        world_bytes(c, G * f * p * i + 2 * G * f * d * e);
        c.lookup_values += G * f * p * d;
      }
      break;
    }
    case ShardingType::ROW_WISE:
      for (int r = 0; r < W; ++r) world_bytes(at(r), B * f * p * i);
      for (const auto& s : sharding.sharding_spec) {
        RankCost& c = at(s.placement);
        const double share = static_cast<double>(s.rows()) / R;
        c.memory_bytes += shard_memory_bytes(s.rows(), s.cols(), t);
        world_bytes(c, G * f * p * i * share + 4 * G * f * D * e);
        c.lookup_values += G * f * p * D * share;
      }
      break;
    case ShardingType::TABLE_ROW_WISE:
      for (int r = 0; r < W; ++r) world_bytes(at(r), B * f * p * i + 2 * B * f * D * e);
      for (const auto& s : sharding.sharding_spec) {
        RankCost& c = at(s.placement);
        const double share = static_cast<double>(s.rows()) / R;
        c.memory_bytes += shard_memory_bytes(s.rows(), s.cols(), t);
        world_bytes(c, G * f * p * i * share + 2 * G * f * D * e / L);
        c.intra_bytes += 4 * G * f * D * e;
        c.lookup_values += G * f * p * D * share;
      }
      break;
  }
  for (auto& c : cost)
    c.seconds = c.intra_bytes / t.intra_node_bandwidth + c.cross_bytes / t.cross_node_bandwidth +
                c.lookup_values * e * (1.0 + t.backward_lookup_factor) / t.lookup_bandwidth;
  return cost;
}

double PlanEstimate::max_seconds() const {
  double m = 0;
  for (const auto& c : rank_totals) m = std::max(m, c.seconds);
  return m;
}

double PlanEstimate::mean_seconds() const {
  if (rank_totals.empty()) return 0;
  double s = 0;
  for (const auto& c : rank_totals) s += c.seconds;
  return s / static_cast<double>(rank_totals.size());
}

PlanEstimate estimate_plan(const ShardingPlan& plan,
                           const std::map<std::string, std::vector<PlannerTable>>& modules,
                           const Topology& topology) {
  topology.validate();
  PlanEstimate out;
  out.rank_totals.resize(static_cast<size_t>(topology.world_size));
  for (const auto& [path, tables] : plan.plan()) {
    auto m = modules.find(path);
    FERRY_CHECK(m != modules.end(), InvalidArgument, "torchrec planner: the plan has module '",
                path, "', which has no table descriptions");
    for (const auto& [name, sharding] : tables) {
      // A named capture: clang 14 cannot capture a structured binding.
      auto t = std::find_if(m->second.begin(), m->second.end(),
                            [&name = name](const PlannerTable& x) { return x.name == name; });
      FERRY_CHECK(t != m->second.end(), InvalidArgument, "torchrec planner: module '", path,
                  "': the plan has table '", name, "', which has no description");
      PlanEstimate::Entry entry{path, name, estimate_table_cost(sharding, *t, topology)};
      for (size_t r = 0; r < entry.per_rank.size(); ++r) out.rank_totals[r] += entry.per_rank[r];
      out.tables.push_back(std::move(entry));
    }
  }
  return out;
}

}  // namespace ferry::torchrec
