// ferry::torchrec embedding lookups on the tape: the local kernels of the embedding modules,
// written so that the sharded modules run the same code on their shards.
//
// A lookup takes a KJT, a list of FeatureLookup (a KJT key and the EmbeddingTable -- a whole
// table or a shard, embedding_table.h -- it is looked up in) and produces
//
//   pooled_embedding_lookup    one Variable [B, sum over lookups of table.shard().num_cols]:
//                              the lookups' pooled blocks side by side in list order
//   sequence_embedding_lookup  one Variable per lookup, [n_ids of the key, num_cols]: row i is
//                              the embedding of the key's i-th id (KJT order)
//
// as ONE tape node whose inputs are the distinct tables' weight() Variables (and the
// per-sample weights). Its backward gives each table a SparseRowGradient of the rows it
// touched (EmbeddingTable::receive_gradient: fused optimizer step or accumulation) and never a
// dense table gradient (the weight Variables' grad() stays undefined).
//
// Pooling of bag b (ids v_1..v_n of the key for sample b, weights w_i or 1):
//   SUM  out_b = sum_i w_i * E[v_i]         (in KJT order, accumulated in the table's dtype)
//   MEAN out_b = (sum_i w_i * E[v_i]) / n   (a division; an empty bag gives zeros)
// Gradients: with gbar_b = upstream_b (SUM) or upstream_b / n (MEAN),
//   dE[r]  = sum over occurrences i with v_i = r of w_i * gbar_b   (occurrence order)
//   dw_i   = sum_d gbar_b[d] * E[v_i][d]                            (d = 0, 1, ...)
//
// Shards (how the sharded modules use this):
//   - Row-wise: a table whose shard holds rows [row_offset, row_offset + num_rows). Ids are
//     global; ids outside the block are skipped (contribute nothing, get no gradient; their
//     per-sample-weight gradient from this shard is 0). The pooled result is the PARTIAL sum of
//     the bag over the block: summing the partials of all row blocks gives the full SUM.
//     For MEAN the divisor must be the FULL bag length n, which the shard does not see after
//     bucketization: either look up with SUM and divide by the full lengths after the
//     reduce-scatter (differentiably), or pass `mean_divisors` -- the full bag lengths, laid
//     out like kjt.lengths() -- so each partial is divided by the full n (then the partials sum
//     to the full MEAN exactly up to rounding). ids out of [0, total_rows) are still errors.
//   - Column-wise: a table whose shard holds columns [col_offset, col_offset + num_cols): the
//     lookup produces those columns of the full result; concatenating the column shards in
//     col_offset order gives the full result (bit-identical: same operations per column).
//   - Per-id (sequence) lookups on a row block give zero rows for ids outside the block.
//   - Keys may repeat in a KJT (bucketized / column-wise inputs): name the key by index.
//
// Per-sample weights: `per_sample_weights` is a Variable with one float32/float64 element per
// KJT value (typically the KJT's weights, as a leaf that requires grad when the weights are
// trained / DDP-managed); undefined means unweighted. Its gradient is computed from the table
// rows as they are at backward: if a table was updated in between (a fused step of another
// lookup node), backward throws instead of using the new rows.
//
// The KJT must not have a variable stride per key (pad a VBE KJT first: pad_variable_stride in
// vbe_pooling.h, as the collections do). All tables of
// one lookup call must share a dtype (the output's). Ids are checked at forward against the
// table's total_rows with the table's BoundsCheckMode.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/torchrec/modules/embedding_config.h>
#include <ferry/collectives/torchrec/modules/embedding_table.h>
#include <ferry/collectives/torchrec/sparse/keyed_jagged_tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ferry::torchrec {

struct FeatureLookup {
  std::shared_ptr<EmbeddingTable> table{};
  std::string feature{};     // the KJT key (also names the feature in errors)
  int64_t key_index = -1;    // >= 0: use this KJT key position instead of looking `feature` up
  PoolingType pooling = PoolingType::Sum;  // pooled lookups only
};

// See above. mean_divisors: optional int32/int64 tensor of kjt.lengths().numel() entries, the
// divisor of each bag for MEAN lookups (default: the bag's length in this KJT).
Variable pooled_embedding_lookup(const std::vector<FeatureLookup>& lookups,
                                 const KeyedJaggedTensor& kjt,
                                 const Variable& per_sample_weights = Variable(),
                                 const Tensor& mean_divisors = Tensor());

std::vector<Variable> sequence_embedding_lookup(const std::vector<FeatureLookup>& lookups,
                                                const KeyedJaggedTensor& kjt);

}  // namespace ferry::torchrec
