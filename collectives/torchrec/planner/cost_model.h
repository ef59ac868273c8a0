// The planner's description of tables and machine, and its cost model: what one training step of a
// sharded embedding table costs each rank, for any ParameterSharding (the planner's own choices and
// hand-written plans alike).
//
// Notation, per table: R rows, D columns, f features looking it up (bags per sample), p expected
// ids per bag (pooling factor); W ranks, L per node, B samples per rank, G = W*B samples in the
// global batch; e bytes per embedding value, i bytes per id. A shard of r rows and d columns.
//
// Memory (bytes on a rank holding the shard):  r * d * e * (1 + s_e)  +  r * s_r * e
//   s_e: optimizer values per table value (SGD 0, Adagrad 1, Adam 2); s_r: per row (row-wise
//   Adagrad 1). data_parallel holds the whole table on every rank.
//
// Communication (bytes a rank sends plus receives per step, forward and backward; a rank's share
// with itself is counted like any other, ids are assumed to fall uniformly over the rows), by the
// comm ops of each sharding type's input and output dists:
//   every rank, every type but data_parallel (its own samples' side of the input and output
//   dists): sends B*f*p*i ids (column_wise: once per column shard), receives its B*f*D pooled
//   values (forward), sends their B*f*D gradients (backward): B*f*p*i*n + 2*B*f*D*e
//   table_wise, owner:            G*f*p*i ids in + G*f*D*e pooled out + G*f*D*e gradients in
//   column_wise / table_column_wise, owner of a d-column shard: G*f*p*i + 2*G*f*d*e
//   row_wise, each rank j (no separate own-sample output term; the reduce-scatter delivers it):
//                                 G*f*p*i*r_j/R ids in (bucketized), reduce-scatter of [G, f*D]
//                                 partial sums (G*f*D*e out + G*f*D*e in), all-gather of the
//                                 gradients in backward (the same again): 4*G*f*D*e
//   table_row_wise on node h, each of its ranks j: G*f*p*i*r_j/R ids in (cross-node), the intra-
//                                 node reduce-scatter / all-gather of [G, f*D] (4*G*f*D*e, intra-
//                                 node) and its G/L samples through the cross-node all-to-all
//                                 (2*G*f*D*e/L, cross-node)
//   data_parallel, every rank:    no embedding dists; the table's gradient goes through the dense
//                                 (ring) all-reduce: 4*(W-1)/W * R*D*e
// Bytes move at intra_node_bandwidth inside a node and at cross_node_bandwidth across nodes; a
// collective over the whole world counts as cross-node when W > L (more than one node).
//
// Lookup (values a rank gathers in forward; backward scatters as many times backward_lookup_factor):
//   table_wise owner G*f*p*D; column shard owner G*f*p*d; row_wise / table_row_wise rank j
//   G*f*p*D*r_j/R; data_parallel every rank B*f*p*D. Time: values * e * (1 + backward_lookup_factor)
//   / lookup_bandwidth.
//
// Estimated cost of a rank (seconds per step) = intra bytes / intra bw + cross bytes / cross bw +
// lookup time. The model is a planning heuristic: it ranks placements, it does not predict step
// times (no latency term, no overlap, no codec compression).
#pragma once

#include <ferry/collectives/torchrec/planner/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ferry::torchrec {

// What a user may restrict per table (torchrec's ParameterConstraints, in part).
struct ParameterConstraints {
  std::vector<ShardingType> sharding_types;             // allowed; empty: all six
  std::vector<EmbeddingComputeKernel> compute_kernels;  // allowed; empty: dense and fused
  int64_t min_partition = 0;  // column shard width for (table_)column_wise; 0: Topology's default
};

// A table as the planner sees it.
struct PlannerTable {
  std::string name;
  int64_t rows = 0;              // num_embeddings
  int64_t dim = 0;               // embedding_dim
  double pooling_factor = 1.0;   // expected ids per bag (1 for a sequence / EmbeddingCollection)
  int num_features = 1;          // features looking this table up (bags per sample)
  ParameterConstraints constraints;

  TableShape shape() const { return {name, rows, dim}; }
};

// The machine and the run (torchrec's Topology plus its batch size and cost constants).
struct Topology {
  int world_size = 1;
  int local_world_size = 1;       // ranks per node (get_local_size); must divide world_size
  int64_t batch_size = 1;         // samples per rank per step
  int64_t memory_budget = 0;      // bytes per rank for embedding tables and optimizer state
  double element_bytes = 4;       // e: float32 tables
  double id_bytes = 8;            // i: int64 ids
  double optimizer_state_per_element = 0;  // s_e
  double optimizer_state_per_row = 0;      // s_r
  double intra_node_bandwidth = 100e9;     // bytes/s
  double cross_node_bandwidth = 12.5e9;    // bytes/s
  double lookup_bandwidth = 20e9;          // bytes/s of embedding values gathered
  double backward_lookup_factor = 1.0;
  int64_t default_min_partition = 64;      // column shard width when a table sets none

  // InvalidArgument naming the field for anything out of range.
  void validate() const;
};

// One table's cost on one rank.
struct RankCost {
  int64_t memory_bytes = 0;
  double intra_bytes = 0;   // bytes moved inside the node
  double cross_bytes = 0;   // bytes moved across nodes
  double lookup_values = 0; // embedding values gathered (forward)
  double seconds = 0;       // estimated time per step

  double comm_bytes() const { return intra_bytes + cross_bytes; }
  RankCost& operator+=(const RankCost& o);
};

// Bytes to hold r rows of d columns with their optimizer state.
int64_t shard_memory_bytes(int64_t rows, int64_t cols, const Topology& topology);

// The per-rank cost (W entries) of `table` sharded as `sharding` (assumed valid for it).
std::vector<RankCost> estimate_table_cost(const ParameterSharding& sharding,
                                          const PlannerTable& table, const Topology& topology);

// Every table's per-rank cost and every rank's totals, for a whole plan.
struct PlanEstimate {
  struct Entry {
    std::string module_path;
    std::string table;
    std::vector<RankCost> per_rank;  // W entries
  };
  std::vector<Entry> tables;         // in the plan's order (module path, then table name)
  std::vector<RankCost> rank_totals; // W entries

  double max_seconds() const;
  double mean_seconds() const;
};

// Throws InvalidArgument when the plan names a table `modules` does not describe.
PlanEstimate estimate_plan(const ShardingPlan& plan,
                           const std::map<std::string, std::vector<PlannerTable>>& modules,
                           const Topology& topology);

}  // namespace ferry::torchrec
