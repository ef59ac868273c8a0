// row_wise sharding (torchrec's rw_sharding): table t's rows split into W blocks of
// ceil(R_t / W), block j on rank j.
//
//   input dist   the KJT's row-wise features, bucketized into W buckets
//                (bucketize_kjt_before_all2all, keep_original_indices: ids stay global, the
//                shard lookup skips nothing because every id it gets is in its block), then
//                KJTAllToAll(splits = [T] * W): rank j receives bucket j of every feature for all
//                W*B samples
//   lookup       pooled: SUM over the rank's row block -> partial sums [W*B, D];
//                sequence: the rows of the ids received
//   output dist  pooled: PooledEmbeddingsReduceScatter (reduce_scatter_base with equal batches,
//                _v otherwise) -> [B, D] on every owner; MEAN pooling: the summed partials are
//                divided by the FULL bag length after the reduce-scatter, on the rank that owns
//                the samples (it holds the lengths of its own KJT), as a differentiable division
//                -- so the lookup runs with SUM and no rank needs another rank's lengths;
//                sequence: SequenceEmbeddingsAllToAll with the unbucketize permutation;
//                VBE (pooled): the partial rows laid out destination-major through
//                VariableBatchPooledEmbeddingsReduceScatter, MEAN divided after it as above.
#pragma once

#include <ferry/collectives/torchrec/dist_data/pooled_embeddings_reduce_scatter.h>
#include <ferry/collectives/torchrec/dist_data/sequence_embeddings_all_to_all.h>
#include <ferry/collectives/torchrec/modules/embedding_lookup.h>
#include <ferry/collectives/torchrec/sharding/embedding_sharding.h>

#include <memory>
#include <string>
#include <vector>

namespace ferry::torchrec {

// A row-wise pooled group's batch (row_wise, table_row_wise): with MEAN pooling, the divisors
// [B, group cols] of this rank's samples, the full bag lengths, applied after the output dist
// (undefined without MEAN and with VBE, which divides by its own).
struct RwPooledShardingContext : PooledShardingContext {
  Tensor mean_divisor;
};

namespace detail {
// The row-wise features of the given tables, in config order.
struct RowWiseFeature {
  int feature = 0;
  std::string key;
  int64_t dim = 0, block_size = 0;
  PoolingType pooling = PoolingType::Sum;
  std::shared_ptr<EmbeddingTable> table;  // this rank's row block
};
std::vector<RowWiseFeature> row_wise_features(const ShardedTables& tables,
                                              const std::vector<int>& table_ids, int num_blocks);
// VBE output of row-wise partial sums (row_wise, table_row_wise): this rank's rows of every
// feature in `features` order, each over this rank's batch of it, laid out one after the other.
// Records their blocks in ctx.vbe_blocks and returns, when a feature pools by MEAN, the divisor
// of every output element (its bag's full length, known only on the rank that owns the sample;
// 1 for SUM and empty bags); undefined otherwise.
Tensor vbe_row_wise_blocks(const std::vector<RowWiseFeature>& features, PooledShardingContext& ctx,
                           DType dtype);
}  // namespace detail

class RwPooledEmbeddingSharding : public PooledEmbeddingSharding {
 public:
  RwPooledEmbeddingSharding(const detail::ShardedTables& tables, std::vector<int> table_ids,
                            bool is_weighted);
  std::shared_ptr<PooledShardingContext> create_context() const override {
    return std::make_shared<RwPooledShardingContext>();
  }
  DistFeaturesAwaitable input_dist(
      const KeyedJaggedTensor& kjt,
      const std::shared_ptr<PooledShardingContext>& ctx) const override;
  Awaitable<Variable> compute_and_output_dist(
      const KeyedJaggedTensor& dist_features,
      const std::shared_ptr<PooledShardingContext>& ctx) const override;

 private:
  Awaitable<Variable> vbe_output_dist(const std::vector<FeatureLookup>& lookups,
                                      const KeyedJaggedTensor& dist,
                                      const std::shared_ptr<PooledShardingContext>& ctx) const;

  Group world_;
  bool weighted_;
  DType dtype_;
  std::vector<detail::RowWiseFeature> features_;
  std::vector<std::string> keys_;
  std::vector<int64_t> dims_, block_sizes_;
  std::vector<PoolingType> pooling_;
  KJTAllToAll input_a2a_;
  PooledEmbeddingsReduceScatter output_rs_;
  VariableBatchPooledEmbeddingsReduceScatter vbe_rs_;  // VBE output dist
};

class RwSequenceEmbeddingSharding : public SequenceEmbeddingSharding {
 public:
  RwSequenceEmbeddingSharding(const detail::ShardedTables& tables, std::vector<int> table_ids);
  DistFeaturesAwaitable input_dist(
      const KeyedJaggedTensor& kjt,
      const std::shared_ptr<SequenceShardingContext>& ctx) const override;
  Awaitable<std::vector<Variable>> compute_and_output_dist(
      const KeyedJaggedTensor& dist_features,
      const std::shared_ptr<SequenceShardingContext>& ctx) const override;

 private:
  Group world_;
  std::vector<detail::RowWiseFeature> features_;
  std::vector<std::string> keys_;
  std::vector<int64_t> block_sizes_;
  KJTAllToAll input_a2a_;
  SequenceEmbeddingsAllToAll output_a2a_;
};

}  // namespace ferry::torchrec
