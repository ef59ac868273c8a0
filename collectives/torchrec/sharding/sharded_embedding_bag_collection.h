// ferry::torchrec::ShardedEmbeddingBagCollection: an EmbeddingBagCollection whose tables are
// sharded over the ranks of a world group by a plan (torchrec's ShardedEmbeddingBagCollection).
//
//   ModuleShardingPlan plan = construct_module_sharding_plan(
//       shapes, {{"t0", table_wise(0)}, {"t1", row_wise()}, {"t2", column_wise({0, 1})}}, W);
//   ShardedEmbeddingBagCollection sebc(configs, /*is_weighted=*/false, plan, world, {},
//                                      FusedOptimizerConfig{.learning_rate = 0.1}, seed);
//   PooledEmbeddings out = sebc.forward(local_kjt);   // [B_local, sum dims], config order
//
// forward(kjt) returns exactly what EmbeddingBagCollection(configs, is_weighted, seed)
// .forward(kjt) gives for this rank's samples (up to rounding where the summation order differs:
// row-wise partial sums), and after a backward of each rank's loss (its mean over its B samples)
// with gradient division on (the default) every table is updated as the unsharded collection's
// would be by the mean loss over the global batch (rank-major). data_parallel tables need the
// averaging step: step_data_parallel() (or reduce_data_parallel_gradients() and a step by hand).
//
// The stages, for a pipeline that overlaps batch i+1's input dist with batch i's compute:
//   EmbeddingBagCollectionContext ctx;            // or sebc.create_context()
//   auto in = sebc.input_dist(ctx, kjt);          // phase 1 of every group's KJT all-to-all
//   auto feats = in.wait();                       // phase 1 done, phase 2 issued
//   std::vector<KeyedJaggedTensor> d = feats.wait();
//   LazyAwaitable<PooledEmbeddings> out = sebc.compute_and_output_dist(ctx, d);
//   out.value()                                   // waits the output dists, assembles
// The collectives of all these calls run on `world`, in the same order on every rank; the
// sharding groups (data_parallel, table/column-wise, row_wise, table_row_wise) always come in
// that order. input_dist first runs the collective input check (ShardedEmbeddingOptions::
// check_inputs): one blocking all_gather. A caller that already exchanges something with every
// rank before each batch (the train pipelines' agreement on the next batch) can carry the
// check's words on it instead: input_check_status, raise_input_check, input_dist_checked.
//
// Errors (InvalidArgument unless said): the plan is validated against the tables at
// construction (a missing or extra table, a rank outside the world, bad shards), and must be the
// same on every rank (MismatchError on every rank, check_plan_agreement); a configured feature
// missing from a rank's KJT, an id out of range (message naming rank, table, feature, sample and
// id), a weighted collection given a KJT without weights: raised on every rank before any
// payload moves. Compute kernels: DENSE and FUSED (the plan's kernel: FUSED shards get the
// fused optimizer, DENSE ones accumulate sparse gradients); data_parallel tables are never
// fused. Not supported: the UVM / QUANT kernels (run as FUSED).
//
// Variable batch per feature (VBE: a KJT with stride_per_key_per_rank and inverse_indices), as
// torchrec: the tables of every sharding type pool every feature over its own batch (the KJT
// all-to-all carries the strides; the output dists are VariableBatchPooledEmbeddingsAllToAll,
// VariableBatchPooledEmbeddingsReduceScatter, or table_row_wise's reduce-scatter within the
// node then all-to-all across) and the output is expanded by the inverse indices to
// [B_out, sum dims], equal to EmbeddingBagCollection::forward on the same KJT. A VBE KJT without
// inverse_indices is refused (InvalidArgument naming the op and the rank, on every rank).
// Ranks may have different batch sizes (an uneven last batch) with every sharding type.
//
// Per-sample weights that require grad (weighted collections): pass them to forward /
// input_dist as a Variable; for every sharding type the caller receives d L_r / d w of its own
// loss L_r, as from EmbeddingBagCollection::forward(kjt, w) on its own batch (data_parallel
// looks the caller's Variable up directly; the other types route the gradient back through the
// input dist, weights_dist.h -- a ferry addition: torchrec's KJTAllToAll gives no gradient).
#pragma once

#include <ferry/collectives/group.h>
#include <ferry/collectives/torchrec/comm/lazy_awaitable.h>
#include <ferry/collectives/torchrec/modules/embedding_bag_collection.h>
#include <ferry/collectives/torchrec/sharding/embedding_sharding.h>
#include <ferry/collectives/torchrec/sharding/sharded_collection_base.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ferry::torchrec {

// One batch's state between a bag collection's stages (torchrec's
// EmbeddingBagCollectionContext): the common part, and for a variable batch per feature (VBE)
// each feature's inverse-index rows (the output's B_out samples), by collection feature.
struct EmbeddingBagCollectionContext : ShardedModuleContext {
  std::vector<std::vector<int64_t>> inverse_rows;  // empty unless the batch is VBE
};

class ShardedEmbeddingBagCollection : public ShardedCollectionBase {
 public:
  // Collective over `world` (plan agreement; the intra/cross-node groups when a table is
  // table_row_wise). `plan`: this module's plan (table name -> ParameterSharding).
  ShardedEmbeddingBagCollection(std::vector<EmbeddingBagConfig> tables, bool is_weighted,
                                const ModuleShardingPlan& plan, Group world,
                                ShardedEmbeddingOptions options = {},
                                std::optional<FusedOptimizerConfig> fused = std::nullopt,
                                uint64_t seed = 0);

  // A batch's context: fill it with input_dist, hand it to compute_and_output_dist.
  using Context = EmbeddingBagCollectionContext;
  std::unique_ptr<Context> create_context() const { return std::make_unique<Context>(); }

  // per_sample_weights (weighted collections only): the KJT's weights as a Variable, e.g. a leaf
  // requiring grad or the output of a weight model; one element per value, the KJT's weights'
  // dtype. When it requires grad (on every rank: checked), its gradient comes back to the caller
  // through the input dist (weights_dist.h; torchrec's KJTAllToAll drops it). The forward values
  // are always the KJT's weights.
  ShardedInputDistAwaitable input_dist(Context& ctx, const KeyedJaggedTensor& features,
                                       const Variable& per_sample_weights = Variable()) const;
  // input_dist without its own check and without per-sample weights, for a caller that ran
  // the check's halves (input_check_status, raise_input_check: ShardedCollectionBase).
  ShardedInputDistAwaitable input_dist_checked(Context& ctx,
                                               const KeyedJaggedTensor& features) const;
  LazyAwaitable<PooledEmbeddings> compute_and_output_dist(
      Context& ctx, const std::vector<KeyedJaggedTensor>& dist_input) const;
  // input_dist, both waits, compute_and_output_dist, wait.
  PooledEmbeddings forward(const KeyedJaggedTensor& features,
                           const Variable& per_sample_weights = Variable()) const;

  const std::vector<EmbeddingBagConfig>& embedding_bag_configs() const { return configs_; }
  bool is_weighted() const { return is_weighted_; }
  const std::vector<int64_t>& length_per_key() const {
    return sharded_tables().feature_dims();
  }
  // Shards, data_parallel tables, state dicts: ShardedCollectionBase.

 private:
  std::vector<EmbeddingBagConfig> configs_;
  bool is_weighted_;
  ShardedInputDistAwaitable start_input_dist(Context& ctx,
                                             const KeyedJaggedTensor& features,
                                             const Variable& per_sample_weights) const;

  std::vector<std::shared_ptr<PooledEmbeddingSharding>> shardings_;
  // What every output awaitable needs (the keys, their dims, the shardings), made once and
  // shared by them: copying it into each step's awaitable was a dozen allocations a step.
  struct OutputParts;
  std::shared_ptr<const OutputParts> output_parts_;
};

}  // namespace ferry::torchrec
