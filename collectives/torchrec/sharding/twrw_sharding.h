// table_row_wise sharding (torchrec's twrw_sharding): table t lives on ONE node h (L = local
// size ranks, G = W / L nodes); its rows are split into L blocks of ceil(R_t / L), block j on
// rank h*L + j.
//
//   input dist   the KJT's table-row-wise features bucketized into L buckets (ids kept global),
//                then permuted so that rank r = h*L + j gets bucket j of node h's features
//                (torchrec's staggered shuffle), KJTAllToAll(splits = features of node(r),
//                stagger = G): the received samples come in (local rank, node) source order,
//                so the block for local rank j holds the samples of ranks j, L + j, 2L + j, ...
//                (local rank j's cross-node group), node by node
//   lookup       SUM over the rank's row block -> partial sums, one row per received sample
//   output dist  intra-node PooledEmbeddingsReduceScatter (block j to local rank j), waited,
//                then cross-node PooledEmbeddingsAllToAll (dims per node) -> [B, sum over
//                nodes of D_h], node-major; MEAN: divided by the full bag length on the owning
//                rank, as row_wise. Ranks with different batch sizes (an uneven last batch):
//                reduce_scatter_v within the node (block j: the batches of local rank j's
//                cross group, summed) and the all-to-all with the cross group's batch sizes.
//                A variable batch per feature (VBE): VariableBatchPooledEmbeddingsReduceScatter
//                within the node and VariableBatchPooledEmbeddingsAllToAll across, as torchrec's
//                TwRwPooledEmbeddingDist.
// The intra- and cross-node groups are intra_and_cross_node_pg(world, L).
#pragma once

#include <ferry/collectives/torchrec/dist_data/pooled_embeddings_all_to_all.h>
#include <ferry/collectives/torchrec/dist_data/pooled_embeddings_reduce_scatter.h>
#include <ferry/collectives/torchrec/sharding/embedding_sharding.h>
#include <ferry/collectives/torchrec/sharding/rw_sharding.h>

#include <memory>
#include <string>
#include <vector>

namespace ferry::torchrec {

class TwRwPooledEmbeddingSharding : public PooledEmbeddingSharding {
 public:
  // intra / cross: this rank's groups of intra_and_cross_node_pg(world, tables.local_size()).
  TwRwPooledEmbeddingSharding(const detail::ShardedTables& tables, std::vector<int> table_ids,
                              bool is_weighted, Group intra, Group cross);
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

  Group world_, intra_, cross_;
  int L_ = 1, G_ = 1;
  bool weighted_;
  DType dtype_;
  // Features in node-major order (node 0's features in config order, then node 1's, ...).
  std::vector<detail::RowWiseFeature> features_;
  std::vector<int> node_;  // node of each feature
  std::vector<std::string> keys_;
  std::vector<int64_t> dims_, block_sizes_;
  std::vector<PoolingType> pooling_;
  std::vector<int64_t> send_permute_;  // bucketized key index of each key sent, rank order
  std::vector<std::string> my_keys_;
  std::vector<int64_t> my_feature_pos_;  // positions in features_ of the features of my node
  std::vector<int64_t> my_dims_;          // their dims
  std::shared_ptr<KJTAllToAll> input_a2a_;
  PooledEmbeddingsReduceScatter intra_rs_;
  std::shared_ptr<PooledEmbeddingsAllToAll> cross_a2a_;
  VariableBatchPooledEmbeddingsReduceScatter vbe_intra_rs_;  // VBE output dist
  std::shared_ptr<VariableBatchPooledEmbeddingsAllToAll> vbe_cross_a2a_;
};

}  // namespace ferry::torchrec
