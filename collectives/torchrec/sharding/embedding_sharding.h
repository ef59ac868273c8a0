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
#include <ferry/collectives/torchrec/dist_data/sequence_embeddings_all_to_all.h>
#include <ferry/collectives/torchrec/modules/vbe_pooling.h>
#include <ferry/collectives/torchrec/sharding/sharded_tables.h>
#include <ferry/collectives/torchrec/sparse/keyed_jagged_tensor.h>
#include <ferry/collectives/torchrec/utils/format.h>
#include <ferry/runtime/awaitable.h>
#include <ferry/runtime/error.h>

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

// What a sharding group keeps of one batch between its input dist and its output dist
// (torchrec's EmbeddingShardingContext). Each sharding type makes its own with create_context:
// the pooled and sequence contexts below, row-wise pooling's in rw_sharding.h.
struct EmbeddingShardingContext {
  virtual ~EmbeddingShardingContext() = default;
  int64_t batch_size = 0;                           // this rank's B
  std::vector<int64_t> stride_per_rank;             // every rank's B (set by phase 1's wait)
  std::optional<KJTAllToAllTensorsAwaitable> dist;  // the input dist's phase 2 (its splits)
};

// A pooled group's batch. Set by the collection before input_dist: `weights`, the caller's
// per-sample weights when they require grad (weights_dist.h), and `vbe_input`, the caller's KJT
// when it has a variable batch per feature (VBE). Set by the sharding: `send_index`, the caller
// position of every value the group sends (with `weights`), and `vbe_blocks`, where each output
// block's rows sit in the group's flat (1-D) VBE output (vbe_pooling.h).
struct PooledShardingContext : EmbeddingShardingContext {
  Variable weights;
  Tensor send_index;
  std::optional<KeyedJaggedTensor> vbe_input;
  std::vector<detail::VbeBlock> vbe_blocks;
};

// A sequence group's batch (torchrec's SequenceShardingContext): the ids of every key sent,
// and for row_wise the permutation that puts the returned rows back in the ids' order.
struct SequenceShardingContext : EmbeddingShardingContext {
  std::vector<int64_t> sent_length_per_key;
  std::optional<Tensor> unbucketize_permute;
};

// ctx as the context type C a sharding made it with (create_context); InvalidArgument naming
// `op` when it is another's (a context passed to a module it did not come from).
template <class C>
C& context_as(EmbeddingShardingContext& ctx, const char* op) {
  C* c = dynamic_cast<C*>(&ctx);
  FERRY_CHECK(c != nullptr, InvalidArgument, op,
              ": the batch's sharding context was made by another sharding (pass the context "
              "input_dist filled, unchanged)");
  return *c;
}

// The input dist: the outer wait finishes phase 1 and issues phase 2; the inner wait gives the
// features this rank looks up.
using DistFeaturesAwaitable = Awaitable<Awaitable<KeyedJaggedTensor>>;

class EmbeddingSharding {
 public:
  virtual ~EmbeddingSharding() = default;
  // The group's output blocks, in the order of its output's columns (pooled) / Variables
  // (sequence).
  const std::vector<OutputBlock>& output_blocks() const { return blocks_; }

 protected:
  std::vector<OutputBlock> blocks_;
};

// input_dist launches the input dist of `kjt` (this rank's batch, every key of the collection)
// and returns at once; collective over the world (every rank, the same order).
class PooledEmbeddingSharding : public EmbeddingSharding {
 public:
  // A new context for one batch (row-wise types keep more in theirs).
  virtual std::shared_ptr<PooledShardingContext> create_context() const {
    return std::make_shared<PooledShardingContext>();
  }
  virtual DistFeaturesAwaitable input_dist(
      const KeyedJaggedTensor& kjt, const std::shared_ptr<PooledShardingContext>& ctx) const = 0;
  // Lookup on this rank's shards, then the output dist launched: [B, sum of the blocks' widths];
  // with VBE (ctx->vbe_input set) a 1-D Variable whose layout ctx->vbe_blocks describes.
  virtual Awaitable<Variable> compute_and_output_dist(
      const KeyedJaggedTensor& dist_features,
      const std::shared_ptr<PooledShardingContext>& ctx) const = 0;
};

class SequenceEmbeddingSharding : public EmbeddingSharding {
 public:
  std::shared_ptr<SequenceShardingContext> create_context() const {
    return std::make_shared<SequenceShardingContext>();
  }
  virtual DistFeaturesAwaitable input_dist(
      const KeyedJaggedTensor& kjt, const std::shared_ptr<SequenceShardingContext>& ctx) const = 0;
  // Lookup, then the output dist launched: one Variable per output block, [ids of the block's
  // feature in this rank's KJT, width], in the KJT's id order.
  virtual Awaitable<std::vector<Variable>> compute_and_output_dist(
      const KeyedJaggedTensor& dist_features,
      const std::shared_ptr<SequenceShardingContext>& ctx) const = 0;
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
                                        const std::shared_ptr<EmbeddingShardingContext>& ctx);
// The weights a pooled lookup of the received `kjt` uses when `weighted` (else undefined): a
// constant Variable of the KJT's weights, or -- when ctx.weights is defined (the caller's weights
// require grad) -- dist_weights (weights_dist.h) through comm_op_gradient_scaling over `group`
// (the factor W when gradient division is on, so that the comm ops' division does not shrink
// their gradient twice), so it reaches the caller. Records the collective backward node on
// every rank: call it even when this rank has nothing to look up.
Variable lookup_weights(const KeyedJaggedTensor& kjt, bool weighted, const Group& group,
                        const PooledShardingContext& ctx);
// When ctx.weights is defined (the caller's per-sample weights, one per value of `kjt`,
// requiring grad): records in ctx.send_index the caller position of every value of
// rearrange(kjt), the KJT the group sends. Does nothing otherwise.
void route_weights(const KeyedJaggedTensor& kjt,
                   const std::function<KeyedJaggedTensor(const KeyedJaggedTensor&)>& rearrange,
                   PooledShardingContext& ctx);
// A sequence group's output dist: `local`, the rows of the ids this rank received, back to the
// ids' owners through `a2a` (with ctx's unbucketize permutation when set; with the per-sample
// recat when the ranks' batches differ), split into the rows of each key the rank sent.
Awaitable<std::vector<Variable>> sequence_output_dist(const SequenceEmbeddingsAllToAll& a2a,
                                                      const Variable& local,
                                                      const KeyedJaggedTensor& dist,
                                                      const SequenceShardingContext& ctx);
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
// The batch of `key` in the VBE input the context holds.
int64_t vbe_batch(const PooledShardingContext& ctx, const std::string& key);
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
