// The per-sharding-type pieces of the sharded embedding collections (torchrec's
// EmbeddingSharding: input dist -> local lookup -> output dist), as one internal interface and a
// few helpers. The implementations live one per file:
//   twcw_sharding.h    table_wise, column_wise, table_column_wise (shards as whole "tables" on
//                      their ranks: KJTAllToAll of their features, pooled / sequence all-to-all),
//                      over the shard units of tw_sharding.h and the column order of
//                      cw_sharding.h
//   rw_sharding.h      row_wise (bucketize, KJTAllToAll, reduce-scatter / sequence all-to-all
//                      with the unbucketize permutation)
//   twrw_sharding.h    table_row_wise (bucketize per node, staggered KJTAllToAll, intra-node
//                      reduce-scatter, cross-node all-to-all)
//   dp_sharding.h      data_parallel (local lookup, no dist)
// A sharded collection groups its tables by sharding type and runs one EmbeddingSharding per
// group, all of them in the same order on every rank (so their collectives match).
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/torchrec/dist_data/kjt_all_to_all.h>
#include <ferry/collectives/torchrec/modules/vbe_pooling.h>
#include <ferry/collectives/torchrec/sharding/sharded_tables.h>
#include <ferry/collectives/torchrec/sparse/keyed_jagged_tensor.h>
#include <ferry/runtime/awaitable.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace ferry::torchrec {

// One column block of a sharding group's output: `width` columns of the feature at position
// `feature` of the collection's feature list (config order), from column `col_offset` of its
// table on.
struct OutputBlock {
  int feature = 0;
  int64_t col_offset = 0;
  int64_t width = 0;
};

// What one sharding group keeps of one batch between its input dist and its output dist.
struct ShardingBatchContext {
  int64_t batch_size = 0;                        // this rank's B
  std::vector<int64_t> stride_per_rank;          // every rank's B (set by phase 1's wait)
  std::optional<KJTAllToAllTensorsAwaitable> dist;  // the input dist's phase 2 (its splits)
  Tensor mean_divisor;                           // row-wise MEAN: [B, group cols] (else undefined)
  std::vector<int64_t> sent_length_per_key;      // sequence: ids of every key sent
  std::optional<Tensor> unbucketize_permute;     // sequence row-wise
  // Pooled, weighted, when the caller's per-sample weights require grad (weights_dist.h): the
  // caller's weights and the caller position of every value this group sends (else undefined).
  Variable weights;
  Tensor send_index;
  // Pooled with a variable batch per feature (VBE): the caller's KJT (its per-feature batches,
  // lengths) and, set by compute_and_output_dist, where each output block's rows sit in the
  // group's flat (1-D) output (vbe_pooling.h).
  std::optional<KeyedJaggedTensor> vbe_input;
  std::vector<detail::VbeBlock> vbe_blocks;
};

// The input dist: the outer wait finishes phase 1 and issues phase 2; the inner wait gives the
// features this rank looks up.
using DistFeaturesAwaitable = Awaitable<Awaitable<KeyedJaggedTensor>>;

class EmbeddingSharding {
 public:
  virtual ~EmbeddingSharding() = default;
  // Launches the input dist of `kjt` (this rank's batch, every key of the collection); returns
  // at once. Collective over the world (every rank, the same order). ctx->weights, when set
  // before the call, are the caller's per-sample weights requiring grad (pooled shardings).
  virtual DistFeaturesAwaitable input_dist(const KeyedJaggedTensor& kjt,
                                           const std::shared_ptr<ShardingBatchContext>& ctx) const = 0;
  // The group's output blocks, in the order of its output's columns (pooled) / Variables
  // (sequence).
  const std::vector<OutputBlock>& output_blocks() const { return blocks_; }

 protected:
  std::vector<OutputBlock> blocks_;
};

class PooledEmbeddingSharding : public EmbeddingSharding {
 public:
  // Lookup on this rank's shards, then the output dist launched: [B, sum of the blocks' widths];
  // with VBE (ctx->vbe_input set) a 1-D Variable whose layout ctx->vbe_blocks describes.
  virtual Awaitable<Variable> compute_and_output_dist(
      const KeyedJaggedTensor& dist_features,
      const std::shared_ptr<ShardingBatchContext>& ctx) const = 0;
};

class SequenceEmbeddingSharding : public EmbeddingSharding {
 public:
  // Lookup, then the output dist launched: one Variable per output block, [ids of the block's
  // feature in this rank's KJT, width], in the KJT's id order.
  virtual Awaitable<std::vector<Variable>> compute_and_output_dist(
      const KeyedJaggedTensor& dist_features,
      const std::shared_ptr<ShardingBatchContext>& ctx) const = 0;
};

namespace detail {

// The collections' input dist: the shardings' two-phase input dists (launched already) joined
// into one two-phase awaitable of their KJTs, in sharding order. The outer wait completes every
// phase 1 (and so issues every phase 2), the inner one every phase 2.
Awaitable<Awaitable<std::vector<KeyedJaggedTensor>>> join_input_dists(
    std::vector<DistFeaturesAwaitable> phase1);
// Launches `a2a` on `send` and records phase 2 (splits, stride per rank) in ctx when the outer
// awaitable is waited.
DistFeaturesAwaitable launch_input_dist(const KJTAllToAll& a2a, const KeyedJaggedTensor& send,
                                        const std::shared_ptr<ShardingBatchContext>& ctx);
// The weights a pooled lookup of the received `kjt` uses when `weighted` (else undefined): a
// constant Variable of the KJT's weights, or -- when ctx.weights is defined (the caller's weights
// require grad) -- dist_weights (weights_dist.h) through comm_op_gradient_scaling over `group`
// (the factor W when gradient division is on, so that the comm ops' division does not shrink
// their gradient twice), so it reaches the caller. Records the collective backward node on
// every rank: call it even when this rank has nothing to look up.
Variable lookup_weights(const KeyedJaggedTensor& kjt, bool weighted, const Group& group,
                        const ShardingBatchContext& ctx);
// When ctx.weights is defined (the caller's per-sample weights, one per value of `kjt`,
// requiring grad): records in ctx.send_index the caller position of every value of
// rearrange(kjt), the KJT the group sends. Does nothing otherwise.
void route_weights(const KeyedJaggedTensor& kjt,
                   const std::function<KeyedJaggedTensor(const KeyedJaggedTensor&)>& rearrange,
                   ShardingBatchContext& ctx);
// kjt permuted to the given features (by name, repeats allowed), renamed to `names` when given
// (the received KJT of an input dist must have unique keys: column shards of one feature on one
// rank travel as "<feature>@<column offset>").
KeyedJaggedTensor select_features(const KeyedJaggedTensor& kjt,
                                  const std::vector<std::string>& features,
                                  const std::vector<std::string>& names = {});
// The local lookup result of a rank that holds no shard of a group: a leaf that requires grad,
// so that the output dist is recorded and this rank joins its backward collective.
Variable empty_local(const Tensor& zeros);
// [B, sum dims] divisors: the bag length of each (sample, feature) for MEAN features (1 for
// empty bags and for SUM features), each repeated over the feature's columns. Undefined when no
// feature pools by MEAN.
Tensor mean_divisor(const KeyedJaggedTensor& kjt, const std::vector<std::string>& features,
                    const std::vector<int64_t>& dims, const std::vector<PoolingType>& pooling,
                    DType dtype);
// The collection's tables by sharding group, in the order the groups run: data_parallel,
// table/column-wise (table_wise, column_wise, table_column_wise), row_wise, table_row_wise.
std::vector<std::vector<int>> tables_by_group(const ShardedTables& tables);
// Output pieces sorted by (feature, column offset) (stable).
std::vector<std::pair<OutputBlock, Variable>> sorted_pieces(
    std::vector<std::pair<OutputBlock, Variable>> pieces);
// sum of v
int64_t sharding_total(const std::vector<int64_t>& v);
// The batch of `key` in the VBE input the context holds.
int64_t vbe_batch(const ShardingBatchContext& ctx, const std::string& key);
// VBE: the flat indices into a padded lookup output [B_max, C] (pad_variable_stride of the
// received `dist`, keys t with `widths` in column order) that lay it out source by source in the
// order the KJT received them: for every source position s, key t, sample b < B(s, t), column d
// -- where key t's samples are its sources' batches in that order (stride_per_key_per_rank[t][s]:
// rank order with stagger 1, so each block goes back to its rank; table_row_wise's staggered
// order otherwise). Also returns B(s, t) as [s][t].
std::vector<int64_t> vbe_destination_index(const KeyedJaggedTensor& dist,
                                           const std::vector<int64_t>& widths, int W,
                                           std::vector<std::vector<int64_t>>& batch_per_rank);

}  // namespace detail
}  // namespace ferry::torchrec
