#include <ferry/collectives/torchrec/planner/types.h>

#include <ferry/collectives/torchrec/utils/format.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <set>
#include <sstream>

namespace ferry::torchrec {

namespace {

struct TypeName {
  ShardingType type;
  std::string_view name;
};
constexpr TypeName kTypeNames[] = {
    {ShardingType::DATA_PARALLEL, "data_parallel"},
    {ShardingType::TABLE_WISE, "table_wise"},
    {ShardingType::COLUMN_WISE, "column_wise"},
    {ShardingType::TABLE_COLUMN_WISE, "table_column_wise"},
    {ShardingType::ROW_WISE, "row_wise"},
    {ShardingType::TABLE_ROW_WISE, "table_row_wise"},
};

struct KernelName {
  EmbeddingComputeKernel kernel;
  std::string_view name;
};
constexpr KernelName kKernelNames[] = {
    {EmbeddingComputeKernel::DENSE, "dense"},
    {EmbeddingComputeKernel::FUSED, "fused"},
    {EmbeddingComputeKernel::FUSED_UVM, "fused_uvm"},
    {EmbeddingComputeKernel::FUSED_UVM_CACHING, "fused_uvm_caching"},
    {EmbeddingComputeKernel::QUANT, "quant"},
    {EmbeddingComputeKernel::QUANT_UVM, "quant_uvm"},
    {EmbeddingComputeKernel::QUANT_UVM_CACHING, "quant_uvm_caching"},
};

std::string shard_text(const ShardMetadata& s) {
  std::ostringstream os;
  auto list = [&](const std::vector<int64_t>& v) {
    os << "[";
    for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
    os << "]";
  };
  list(s.shard_offsets);
  os << "+";
  list(s.shard_sizes);
  os << "@" << s.placement;
  return os.str();
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::string_view to_string(ShardingType type) {
  for (const auto& t : kTypeNames)
    if (t.type == type) return t.name;
  return "unknown";
}

std::string_view to_string(EmbeddingComputeKernel kernel) {
  for (const auto& k : kKernelNames)
    if (k.kernel == kernel) return k.name;
  return "unknown";
}

ShardingType parse_sharding_type(std::string_view name) {
  std::string known;
  for (const auto& t : kTypeNames) {
    if (t.name == name) return t.type;
    if (!known.empty()) known += ", ";
    known += t.name;
  }
  FERRY_THROW(InvalidArgument, "torchrec: unknown sharding type '", name, "' (known: ", known, ")");
}

EmbeddingComputeKernel parse_compute_kernel(std::string_view name) {
  std::string known;
  for (const auto& k : kKernelNames) {
    if (k.name == name) return k.kernel;
    if (!known.empty()) known += ", ";
    known += k.name;
  }
  FERRY_THROW(InvalidArgument, "torchrec: unknown compute kernel '", name, "' (known: ", known,
              ")");
}

const std::vector<ShardingType>& all_sharding_types() {
  static const std::vector<ShardingType> all = [] {
    std::vector<ShardingType> v;
    for (const auto& t : kTypeNames) v.push_back(t.type);
    return v;
  }();
  return all;
}

const std::vector<EmbeddingComputeKernel>& all_compute_kernels() {
  static const std::vector<EmbeddingComputeKernel> all = [] {
    std::vector<EmbeddingComputeKernel> v;
    for (const auto& k : kKernelNames) v.push_back(k.kernel);
    return v;
  }();
  return all;
}

std::string ParameterSharding::describe() const {
  std::string s = std::string(to_string(sharding_type)) + " " +
                  std::string(to_string(compute_kernel)) + " ranks " + detail::compact_list_str(ranks) + " shards";
  if (sharding_spec.empty()) return s + " none";
  for (const auto& shard : sharding_spec) {
    s += ' ';
    s += shard_text(shard);
  }
  return s;
}

std::vector<ShardMetadata> ParameterSharding::shards_on_rank(int rank,
                                                             const TableShape& table) const {
  std::vector<ShardMetadata> out;
  if (sharding_type == ShardingType::DATA_PARALLEL) {
    if (std::find(ranks.begin(), ranks.end(), rank) != ranks.end())
      out.push_back({{0, 0}, {table.rows, table.dim}, rank});
    return out;
  }
  for (const auto& s : sharding_spec)
    if (s.placement == rank) out.push_back(s);
  return out;
}

void ParameterSharding::serialize(ByteWriter& out) const {
  out.put(static_cast<int32_t>(sharding_type));
  out.put(static_cast<int32_t>(compute_kernel));
  out.put(ranks);
  out.put(static_cast<uint64_t>(sharding_spec.size()));
  for (const auto& s : sharding_spec) {
    out.put(s.shard_offsets);
    out.put(s.shard_sizes);
    out.put(static_cast<int32_t>(s.placement));
  }
}

ParameterSharding ParameterSharding::deserialize(ByteReader& in) {
  ParameterSharding p;
  const auto type = in.get<int32_t>();
  const auto kernel = in.get<int32_t>();
  if (type < 0 || type >= static_cast<int32_t>(std::size(kTypeNames)) || kernel < 0 ||
      kernel >= static_cast<int32_t>(std::size(kKernelNames)))
    FERRY_THROW(MismatchError, "torchrec: a serialized ParameterSharding holds sharding type ",
                type, " / compute kernel ", kernel, ", which are not enum values");
  p.sharding_type = static_cast<ShardingType>(type);
  p.compute_kernel = static_cast<EmbeddingComputeKernel>(kernel);
  p.ranks = in.get<std::vector<int>>();
  const auto n = in.get<uint64_t>();
  for (uint64_t i = 0; i < n; ++i) {
    ShardMetadata s;
    s.shard_offsets = in.get<std::vector<int64_t>>();
    s.shard_sizes = in.get<std::vector<int64_t>>();
    s.placement = in.get<int32_t>();
    p.sharding_spec.push_back(std::move(s));
  }
  return p;
}

std::optional<ModuleShardingPlan> ShardingPlan::get_plan_for_module(
    const std::string& module_path) const {
  auto it = plan_.find(module_path);
  if (it == plan_.end()) return std::nullopt;
  return it->second;
}

void ShardingPlan::set_plan_for_module(const std::string& module_path,
                                       ModuleShardingPlan module_plan) {
  plan_[module_path] = std::move(module_plan);
}

std::string ShardingPlan::to_string() const {
  std::string s;
  for (const auto& [module, tables] : plan_)
    for (const auto& [table, sharding] : tables)
      s += module + "\t" + table + "\t" + sharding.describe() + "\n";
  return s;
}

void ShardingPlan::serialize(ByteWriter& out) const {
  out.put(static_cast<uint64_t>(plan_.size()));
  for (const auto& [module, tables] : plan_) {
    out.put(module);
    out.put(static_cast<uint64_t>(tables.size()));
    for (const auto& [table, sharding] : tables) {
      out.put(table);
      sharding.serialize(out);
    }
  }
}

ShardingPlan ShardingPlan::deserialize(ByteReader& in) {
  ShardingPlan plan;
  const auto modules = in.get<uint64_t>();
  for (uint64_t m = 0; m < modules; ++m) {
    auto module = in.get<std::string>();
    ModuleShardingPlan tables;
    const auto n = in.get<uint64_t>();
    for (uint64_t t = 0; t < n; ++t) {
      auto table = in.get<std::string>();
      tables.emplace(std::move(table), ParameterSharding::deserialize(in));
    }
    plan.plan_.emplace(std::move(module), std::move(tables));
  }
  return plan;
}

// ---- validation ----

namespace {

// Throws InvalidArgument "torchrec plan: <where>table 't' (R x D, type): <what>".
class Checker {
 public:
  Checker(const ParameterSharding& p, const TableShape& t, const std::string& where)
      : p_(p), t_(t), where_(where) {}

  template <class... A>
  void check(bool ok, const A&... what) const {
    if (ok) return;
    FERRY_THROW(InvalidArgument, "torchrec plan: ", where_.empty() ? "" : where_ + ", ", "table '",
                t_.name, "' (", t_.rows, " rows x ", t_.dim, " cols, ",
                to_string(p_.sharding_type), "): ", what...);
  }

 private:
  const ParameterSharding& p_;
  const TableShape& t_;
  const std::string& where_;
};

std::vector<int> iota_ranks(int first, int count) {
  std::vector<int> v(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) v[static_cast<size_t>(i)] = first + i;
  return v;
}

// Row blocks of ceil(R/n) rows on `ranks`, as row_wise and table_row_wise lay them out.
void check_row_blocks(const Checker& c, const ParameterSharding& p, const TableShape& t,
                      const std::vector<int>& expected_ranks, const char* block_name) {
  const int n = static_cast<int>(expected_ranks.size());
  c.check(p.sharding_spec.size() == expected_ranks.size(), "expected ", n, " row blocks (one per ",
          block_name, " rank), got ", p.sharding_spec.size(), " shards");
  const int64_t b = ceil_div(t.rows, n);
  for (int j = 0; j < n; ++j) {
    const auto& s = p.sharding_spec[static_cast<size_t>(j)];
    const int64_t start = std::min<int64_t>(j * b, t.rows);
    const int64_t rows = std::min<int64_t>(b, t.rows - start);
    c.check(s.placement == expected_ranks[static_cast<size_t>(j)], "row block ", j,
            " must be on rank ", expected_ranks[static_cast<size_t>(j)], ", is on rank ",
            s.placement);
    c.check(s.row_offset() == start && s.rows() == rows && s.col_offset() == 0 &&
                s.cols() == t.dim,
            "row block ", j, " must be ", shard_text({{start, 0}, {rows, t.dim}, s.placement}),
            " (blocks of ceil(", t.rows, "/", n, ") = ", b, " rows, the last short), got ",
            shard_text(s));
  }
}

void check_column_shards(const Checker& c, const ParameterSharding& p, const TableShape& t) {
  c.check(!p.sharding_spec.empty(), "a column-wise table needs at least one shard");
  int64_t next = 0;
  for (size_t j = 0; j < p.sharding_spec.size(); ++j) {
    const auto& s = p.sharding_spec[j];
    c.check(s.row_offset() == 0 && s.rows() == t.rows, "column shard ", j,
            " must hold all rows [0, ", t.rows, "), got ", shard_text(s));
    c.check(s.cols() >= 1, "column shard ", j, " is empty: ", shard_text(s));
    c.check(s.col_offset() == next, "column shard ", j, " must start at column ", next,
            " (shards in column order, no gap or overlap), got ", shard_text(s));
    next += s.cols();
  }
}

}  // namespace

void validate_parameter_sharding(const ParameterSharding& p, const TableShape& t, int world_size,
                                 int local_size, const std::string& where) {
  FERRY_CHECK(world_size >= 1 && local_size >= 1 && world_size % local_size == 0, InvalidArgument,
              "torchrec plan: world size ", world_size, " and local size ", local_size,
              " (need both >= 1 and local size dividing world size)");
  Checker c(p, t, where);
  c.check(t.rows >= 1 && t.dim >= 1, "rows and cols must be >= 1");
  if (p.sharding_type == ShardingType::DATA_PARALLEL) {
    c.check(p.sharding_spec.empty(), "data_parallel has no shards, got ", p.sharding_spec.size());
    c.check(p.ranks == iota_ranks(0, world_size), "data_parallel ranks must be every rank ",
            detail::compact_list_str(iota_ranks(0, world_size)), ", got ", detail::compact_list_str(p.ranks));
    c.check(p.compute_kernel == EmbeddingComputeKernel::DENSE,
            "data_parallel needs the dense compute kernel, got ", to_string(p.compute_kernel));
    return;
  }
  // Generic: ranks match the placements, shapes well formed, shards inside, exact tiling.
  c.check(p.ranks.size() == p.sharding_spec.size(), "ranks ", detail::compact_list_str(p.ranks), " has ",
          p.ranks.size(), " entries for ", p.sharding_spec.size(), " shards");
  int64_t area = 0;
  for (size_t j = 0; j < p.sharding_spec.size(); ++j) {
    const auto& s = p.sharding_spec[j];
    c.check(s.shard_offsets.size() == 2 && s.shard_sizes.size() == 2, "shard ", j,
            " needs 2-D offsets and sizes, got ", shard_text(s));
    c.check(s.placement >= 0 && s.placement < world_size, "shard ", j, " is placed on rank ",
            s.placement, ", outside [0, ", world_size, ")");
    c.check(p.ranks[j] == s.placement, "ranks[", j, "] = ", p.ranks[j],
            " but shard ", j, " is placed on rank ", s.placement);
    c.check(s.row_offset() >= 0 && s.col_offset() >= 0 && s.rows() >= 0 && s.cols() >= 0 &&
                s.row_offset() + s.rows() <= t.rows && s.col_offset() + s.cols() <= t.dim,
            "shard ", j, " ", shard_text(s), " is not inside the table");
    area += s.rows() * s.cols();
    for (size_t k = 0; k < j; ++k) {
      const auto& o = p.sharding_spec[k];
      const bool disjoint = s.rows() == 0 || s.cols() == 0 || o.rows() == 0 || o.cols() == 0 ||
                            s.row_offset() + s.rows() <= o.row_offset() ||
                            o.row_offset() + o.rows() <= s.row_offset() ||
                            s.col_offset() + s.cols() <= o.col_offset() ||
                            o.col_offset() + o.cols() <= s.col_offset();
      c.check(disjoint, "shards ", k, " ", shard_text(o), " and ", j, " ", shard_text(s),
              " overlap");
    }
  }
  c.check(area == t.rows * t.dim, "the shards cover ", area, " of the table's ", t.rows * t.dim,
          " cells (they must tile it exactly)");
  switch (p.sharding_type) {
    case ShardingType::TABLE_WISE:
      c.check(p.sharding_spec.size() == 1, "table_wise has one shard, got ",
              p.sharding_spec.size());
      break;
    case ShardingType::COLUMN_WISE:
      check_column_shards(c, p, t);
      break;
    case ShardingType::TABLE_COLUMN_WISE: {
      check_column_shards(c, p, t);
      const int node = p.ranks.front() / local_size;
      for (int r : p.ranks)
        c.check(r / local_size == node, "table_column_wise ranks ", detail::compact_list_str(p.ranks),
                " span more than one node (local size ", local_size, "): rank ", r,
                " is on node ", r / local_size, ", rank ", p.ranks.front(), " on node ", node);
      break;
    }
    case ShardingType::ROW_WISE:
      check_row_blocks(c, p, t, iota_ranks(0, world_size), "world");
      break;
    case ShardingType::TABLE_ROW_WISE: {
      c.check(!p.sharding_spec.empty(), "table_row_wise needs shards");
      const int node = p.sharding_spec.front().placement / local_size;
      check_row_blocks(c, p, t, iota_ranks(node * local_size, local_size), "node-local");
      break;
    }
    case ShardingType::DATA_PARALLEL:
      break;
  }
}

void validate_module_plan(const ModuleShardingPlan& plan, const std::vector<TableShape>& tables,
                          int world_size, int local_size, const std::string& module_path) {
  const std::string where = "module '" + module_path + "'";
  std::set<std::string> names;
  for (const auto& t : tables) {
    FERRY_CHECK(!t.name.empty(), InvalidArgument, "torchrec plan: ", where,
                " has a table with an empty name");
    FERRY_CHECK(names.insert(t.name).second, InvalidArgument, "torchrec plan: ", where,
                " lists table '", t.name, "' twice (table names must be unique)");
    FERRY_CHECK(plan.count(t.name) == 1, InvalidArgument, "torchrec plan: ", where, ", table '",
                t.name, "' has no entry in the plan (every table needs exactly one)");
  }
  for (const auto& [name, sharding] : plan)
    FERRY_CHECK(names.count(name) == 1, InvalidArgument, "torchrec plan: ", where,
                " has an entry for table '", name, "', which the module does not have");
  for (const auto& t : tables)
    validate_parameter_sharding(plan.at(t.name), t, world_size, local_size, where);
}

void validate_plan(const ShardingPlan& plan,
                   const std::map<std::string, std::vector<TableShape>>& modules, int world_size,
                   int local_size) {
  for (const auto& [path, tables] : modules) {
    auto module_plan = plan.get_plan_for_module(path);
    FERRY_CHECK(module_plan.has_value(), InvalidArgument, "torchrec plan: module '", path,
                "' has no plan");
    validate_module_plan(*module_plan, tables, world_size, local_size, path);
  }
  for (const auto& [path, module_plan] : plan.plan())
    FERRY_CHECK(modules.count(path) == 1, InvalidArgument, "torchrec plan: the plan has module '",
                path, "', which the model does not have");
}

}  // namespace ferry::torchrec
