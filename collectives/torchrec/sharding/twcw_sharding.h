// table_column_wise sharding (torchrec's twcw_sharding), and with it table_wise and column_wise:
// every shard -- a whole table for table_wise, a column range for the others -- acts as a table
// of its own on the rank it is placed on. One EmbeddingSharding serves the three types, so a
// collection's tables of any of them share one input and one output all-to-all; the shard units
// they share are in tw_sharding.h, the column-range additions in cw_sharding.h.
//
//   input dist   the collection's KJT permuted to one key per (shard, feature of its table),
//                ordered by the shard's rank (a feature repeats once per column shard), then
//                KJTAllToAll(splits = keys per rank): each rank receives its shards' features
//                for all W*B samples (rank-major)
//   lookup       pooled_embedding_lookup / sequence_embedding_lookup on the rank's shards
//   output dist  pooled: PooledEmbeddingsAllToAll(dims per rank) with the column permutation
//                callback (PermutePooledEmbeddingsSplit) putting the blocks in (feature,
//                column) order; sequence: SequenceEmbeddingsAllToAll back to the ids' owners;
//                VBE (pooled): VariableBatchPooledEmbeddingsAllToAll of the rows laid out
//                destination-major, the collection gathers the columns back in order.
// A sequence group needs one width for all its shards (the sequence all-to-all moves [N, D]
// rows): the collection makes one group per distinct shard width.
#pragma once

#include <ferry/collectives/torchrec/dist_data/pooled_embeddings_all_to_all.h>
#include <ferry/collectives/torchrec/dist_data/sequence_embeddings_all_to_all.h>
#include <ferry/collectives/torchrec/sharding/cw_sharding.h>
#include <ferry/collectives/torchrec/sharding/embedding_sharding.h>

#include <memory>
#include <string>
#include <vector>

namespace ferry::torchrec {

class TwCwPooledEmbeddingSharding : public PooledEmbeddingSharding {
 public:
  // table_ids: tables (config positions) sharded table_wise, column_wise or table_column_wise.
  TwCwPooledEmbeddingSharding(const detail::ShardedTables& tables, std::vector<int> table_ids,
                              bool is_weighted);
  DistFeaturesAwaitable input_dist(
      const KeyedJaggedTensor& kjt,
      const std::shared_ptr<PooledShardingContext>& ctx) const override;
  Awaitable<Variable> compute_and_output_dist(
      const KeyedJaggedTensor& dist_features,
      const std::shared_ptr<PooledShardingContext>& ctx) const override;

 private:
  Group world_;
  bool weighted_;
  DType dtype_;
  std::vector<detail::ShardUnit> units_;
  std::vector<std::string> send_keys_;
  std::vector<std::string> send_names_;  // the units' wire names, made once
  std::vector<int64_t> dims_per_rank_;
  // This rank's lookups, made once: built per call they cost a list and its growth every step.
  std::vector<FeatureLookup> lookups_;
  KJTAllToAll input_a2a_;
  PooledEmbeddingsAllToAll output_a2a_;
  VariableBatchPooledEmbeddingsAllToAll vbe_a2a_;  // VBE output dist
};

class TwCwSequenceEmbeddingSharding : public SequenceEmbeddingSharding {
 public:
  // The shards of width `width` of the given tables.
  TwCwSequenceEmbeddingSharding(const detail::ShardedTables& tables, std::vector<int> table_ids,
                                int64_t width);
  DistFeaturesAwaitable input_dist(
      const KeyedJaggedTensor& kjt,
      const std::shared_ptr<SequenceShardingContext>& ctx) const override;
  Awaitable<std::vector<Variable>> compute_and_output_dist(
      const KeyedJaggedTensor& dist_features,
      const std::shared_ptr<SequenceShardingContext>& ctx) const override;

 private:
  Group world_;
  DType dtype_;
  int64_t width_;
  std::vector<detail::ShardUnit> units_;
  std::vector<std::string> send_keys_;
  std::vector<std::string> send_names_;  // the units' wire names, made once
  std::vector<FeatureLookup> lookups_;     // this rank's lookups, made once
  KJTAllToAll input_a2a_;
  SequenceEmbeddingsAllToAll output_a2a_;
};

}  // namespace ferry::torchrec
