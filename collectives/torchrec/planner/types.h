// The plan types of torchrec's sharding (torchrec.distributed.types / embedding_types): how each
// embedding table is split over the ranks.
//
//   ShardingType            data_parallel, table_wise, column_wise, table_column_wise, row_wise,
//                           table_row_wise (torchrec's string values)
//   EmbeddingComputeKernel  dense, fused, ... (torchrec's string values)
//   ShardMetadata           one rectangle of a table: offsets [row, col], sizes [rows, cols], rank
//   ParameterSharding       {sharding_type, compute_kernel, ranks, sharding_spec}
//   ModuleShardingPlan      table name -> ParameterSharding (torchrec's EmbeddingModuleShardingPlan)
//   ShardingPlan            module path -> ModuleShardingPlan
//
// What a valid ParameterSharding of table t (R rows, D columns) looks like, for W ranks with L ranks
// per node (L divides W; node h holds ranks [h*L, h*L + L)):
//
//   data_parallel      no shards (sharding_spec empty); ranks = [0, 1, ..., W-1]; kernel dense
//   table_wise         one shard [0,0] of [R, D] on ranks[0]; ranks has one entry
//   column_wise        n >= 1 shards, each of all R rows and a column range, contiguous in column
//                      order, widths >= 1, covering [0, D); shard j on ranks[j] (ranks may repeat)
//   table_column_wise  as column_wise, every rank on one node
//   row_wise           W shards, shard j on rank j with rows [j*b, min((j+1)*b, R)), b = ceil(R/W)
//                      (trailing shards are short or empty when R is not a multiple of W), all D
//                      columns; ranks = [0, ..., W-1]
//   table_row_wise     L shards on the L ranks of one node h, shard j on rank h*L + j with rows
//                      [j*b, min((j+1)*b, R)), b = ceil(R/L); ranks = [h*L, ..., h*L + L-1]
//
// and, for every type but data_parallel, ranks[j] == sharding_spec[j].placement, every rank in
// [0, W), and the shards tile the table exactly (inside it, no overlap, total area R*D).
// Validation raises ferry::InvalidArgument naming the module, the table and what is wrong.
//
// A plan must be identical on every rank: check_plan_agreement (plan_agreement.h) verifies it
// collectively, once, when the sharded modules are built.
#pragma once

#include <ferry/collectives/torchrec/utils/serialization.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::torchrec {

enum class ShardingType {
  DATA_PARALLEL,
  TABLE_WISE,
  COLUMN_WISE,
  TABLE_COLUMN_WISE,
  ROW_WISE,
  TABLE_ROW_WISE,
};

// torchrec's compute kernels. ferry runs DENSE (the table is a parameter the dense optimizer
// steps; the only kernel data_parallel accepts) and FUSED (the sparse optimizer is applied in the
// lookup's backward); the UVM / QUANT names are kept so a ported plan parses, and a sharded
// module that cannot run one says so.
enum class EmbeddingComputeKernel {
  DENSE,
  FUSED,
  FUSED_UVM,
  FUSED_UVM_CACHING,
  QUANT,
  QUANT_UVM,
  QUANT_UVM_CACHING,
};

// "data_parallel", "table_wise", ... / "dense", "fused", ... (torchrec's enum values).
std::string_view to_string(ShardingType type);
std::string_view to_string(EmbeddingComputeKernel kernel);
// The inverse; InvalidArgument listing the known names for anything else.
ShardingType parse_sharding_type(std::string_view name);
EmbeddingComputeKernel parse_compute_kernel(std::string_view name);
// Every value, in declaration order.
const std::vector<ShardingType>& all_sharding_types();
const std::vector<EmbeddingComputeKernel>& all_compute_kernels();

// The shape a plan is checked against: what the sharded modules know of each table (its
// EmbeddingBagConfig / EmbeddingConfig name, num_embeddings and embedding_dim).
struct TableShape {
  std::string name;
  int64_t rows = 0;  // num_embeddings, >= 1
  int64_t dim = 0;   // embedding_dim, >= 1
};

// One shard: rows [shard_offsets[0], + shard_sizes[0]), columns [shard_offsets[1], +
// shard_sizes[1]) of the table, stored on rank `placement` (torchrec's ShardMetadata, whose
// placement is "rank:r/device").
struct ShardMetadata {
  std::vector<int64_t> shard_offsets;  // {row, col}
  std::vector<int64_t> shard_sizes;    // {rows, cols}
  int placement = 0;

  int64_t rows() const { return shard_sizes.size() == 2 ? shard_sizes[0] : 0; }
  int64_t cols() const { return shard_sizes.size() == 2 ? shard_sizes[1] : 0; }
  int64_t row_offset() const { return shard_offsets.size() == 2 ? shard_offsets[0] : 0; }
  int64_t col_offset() const { return shard_offsets.size() == 2 ? shard_offsets[1] : 0; }
  bool operator==(const ShardMetadata&) const = default;
};

struct ParameterSharding {
  ShardingType sharding_type = ShardingType::DATA_PARALLEL;
  EmbeddingComputeKernel compute_kernel = EmbeddingComputeKernel::DENSE;
  std::vector<int> ranks;                    // rank of each shard (all W for data_parallel)
  std::vector<ShardMetadata> sharding_spec;  // torchrec's EnumerableShardingSpec; empty for DP

  bool operator==(const ParameterSharding&) const = default;
  // "row_wise fused ranks [0,1] shards [0,0]+[3,4]@0 [3,0]+[2,4]@1" (one line).
  std::string describe() const;
  // The shards stored on `rank`, in sharding_spec order (data_parallel: the whole table on every
  // rank, so one shard [0,0]+[R,D] placed there for any rank in [0, W)).
  std::vector<ShardMetadata> shards_on_rank(int rank, const TableShape& table) const;

  void serialize(ByteWriter& out) const;
  static ParameterSharding deserialize(ByteReader& in);
};

// Table name -> its sharding, for one module (an EmbeddingBagCollection / EmbeddingCollection).
// Ordered by name, so iteration and serialization are the same on every rank.
using ModuleShardingPlan = std::map<std::string, ParameterSharding>;

class ShardingPlan {
 public:
  ShardingPlan() = default;
  explicit ShardingPlan(std::map<std::string, ModuleShardingPlan> plan) : plan_(std::move(plan)) {}

  // The plan of the module at `module_path` ("" for a model that is itself the collection,
  // "sparse.ebc" for a nested one), or nullopt when the plan has none (torchrec returns None).
  std::optional<ModuleShardingPlan> get_plan_for_module(const std::string& module_path) const;
  // Adds or replaces one module's plan.
  void set_plan_for_module(const std::string& module_path, ModuleShardingPlan module_plan);

  const std::map<std::string, ModuleShardingPlan>& plan() const { return plan_; }
  bool operator==(const ShardingPlan&) const = default;

  // Canonical text, one line per table, "module<TAB>table<TAB>describe()"; the same bytes on
  // every rank holding an equal plan. plan_fingerprint hashes it.
  std::string to_string() const;

  void serialize(ByteWriter& out) const;
  static ShardingPlan deserialize(ByteReader& in);

 private:
  std::map<std::string, ModuleShardingPlan> plan_;
};

// Checks one table's sharding (the rules above); `where` prefixes the message (e.g. "module
// 'sparse.ebc'"). local_size must be >= 1 and divide world_size (InvalidArgument otherwise).
void validate_parameter_sharding(const ParameterSharding& sharding, const TableShape& table,
                                 int world_size, int local_size, const std::string& where = "");
// Checks a module's plan against its tables: table names unique and non-empty, rows and dim >= 1,
// every table has an entry, no entry names a table the module does not have, each entry valid.
void validate_module_plan(const ModuleShardingPlan& plan, const std::vector<TableShape>& tables,
                          int world_size, int local_size, const std::string& module_path = "");
// The same for every module of `modules` (module path -> its tables); the plan must hold exactly
// these modules.
void validate_plan(const ShardingPlan& plan,
                   const std::map<std::string, std::vector<TableShape>>& modules, int world_size,
                   int local_size);

}  // namespace ferry::torchrec
