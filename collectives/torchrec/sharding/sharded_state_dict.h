// The state of a sharded collection as torchrec names it: the weights as full tables or as this
// rank's shards, and the fused optimizers' state as full tables. A state saved under one plan
// and world size loads into any other (each rank cuts its shards out of the full tables).
#pragma once

#include <ferry/collectives/torchrec/sharding/data_parallel_tables.h>
#include <ferry/collectives/torchrec/sharding/sharded_tables.h>

#include <map>
#include <string>
#include <vector>

namespace ferry::torchrec {

// One shard of a table stored on this rank, with its place in the table.
struct LocalShard {
  ShardMetadata metadata;  // offsets, sizes, placement (this rank)
  Tensor tensor;           // the shard's weight (shares the table's storage)
};

namespace detail {

// Full tables "<prefix>.<table>.weight", gathered (collective: every rank calls it).
std::map<std::string, Tensor> state_dict(const ShardedTables& tables);
// This rank's shards "<prefix>.<table>.weight" -> its shards with offsets (local).
std::map<std::string, std::vector<LocalShard>> local_state_dict(const ShardedTables& tables);
// Copies each full table of `state` into this rank's shards (local; every table present with
// its [rows, dim] shape). The fused optimizers' state is kept.
void load_state_dict(const ShardedTables& tables, const std::map<std::string, Tensor>& state);

// The fused optimizers' state as whole tables (collective: every rank calls it), for each
// table whose optimizer keeps state; "<prefix>.<table>.weight." followed by:
//   "step"        int64 [1], the table's step count;
//   "momentum1"   element-wise state (EXACT_ADAGRAD, ADAM's m): [rows, dim]; row-wise state
//                 (EXACT_ROWWISE_ADAGRAD): [rows, k], one column per column block of the
//                 plan (k = 1 unless the table is split by columns: each column shard keeps
//                 its own row state), with "momentum1.col_offsets" int64 [k], their first
//                 columns;
//   "momentum2"   ADAM's v, [rows, dim].
// data_parallel tables contribute the state of their optimizer (`dp`) once it has stepped.
// Empty without a fused config. sharded_optimizer_state.cpp.
std::map<std::string, Tensor> optimizer_state_dict(const ShardedTables& tables,
                                                   const DataParallelOptimizers& dp);
// Cuts a state optimizer_state_dict() made (any plan, any world size) into this rank's
// optimizers (local). Row-wise state moves only between identical column blocks (a row's
// state of two blocks cannot be split or merged exactly): InvalidArgument otherwise, and
// for a missing key or a wrong shape.
void load_optimizer_state_dict(const ShardedTables& tables, DataParallelOptimizers& dp,
                               const std::map<std::string, Tensor>& state);

}  // namespace detail
}  // namespace ferry::torchrec
