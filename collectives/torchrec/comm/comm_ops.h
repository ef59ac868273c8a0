// torchrec.distributed.comm_ops on ferry's tape: the embedding comm ops, their info structs, and
// their forward, backward and gradient division.
//
// Every op is differentiable and runs on torchrec's Req/Wait split
// (collectives/differentiable/req_wait.h): the call launches the collective and returns an
// Awaitable before it completes; wait() records the node that completes it and returns the
// output Variable(s). In backward the Wait node launches the gradient collective and the Req
// node waits for it, so the nodes recorded between the call and wait() run while it is in
// flight, in both directions.
//
//   auto req = alltoall_pooled(x, All2AllPooledInfo({2, 1}, {2, 1}), group);  // in flight
//   Variable h = mlp(dense);       // overlaps the all-to-all (and its gradient in backward)
//   Variable y = req.wait();       // [B_me, sum of dims]
//
// Common contract (every op):
//  - Every rank of `group` calls the op, in the same order, with consistent arguments, and
//    waits for the result once (a second wait throws InvalidArgument); the inputs require grad
//    on every rank or on none (req_wait.h has the rest: dropped requests, errors at wait).
//  - Backward is the exact transpose of the forward (an all-to-all with the sizes swapped,
//    reduce-scatter <-> all-gather), then divided by W = group.size() when gradient division
//    is on (comm_switches.h), read when the backward runs: the adjoint of the mean objective
//    (1/W) sum_r L_r (exact-P/W); exact-P with division off. Exception: alltoallv.
//  - Group size 1: a NoWait of the input itself, no node, no codec (a plain identity; the
//    list ops: inputs[rank]). alltoallv has no such shortcut (its output is not its input).
//  - Sync collectives on (comm_switches.h): the collective runs at once and the result is a
//    NoWait, with the same values and gradients bit for bit as the asynchronous path (the same
//    op runs), except that the division is the switch as the forward saw it; this also holds
//    for alltoallv, whose synchronous backward divides (torchrec's AllToAllSingle does).
//  - Codecs (qcomm_codec.h): the forward codec wraps the forward collective, the backward
//    codec the gradient collective: encode -> sizes via calc_quantized_size -> collective in
//    the encoded dtype (reductions too) -> decode (then the division). Values are float32 or
//    float64; a codec other than no-op encodes their float32 conversion and decodes back to
//    their dtype; no codec / a no-op codec moves them as they are.
//  - Bad input: InvalidArgument on the calling rank, naming the op, the rank and the offending
//    values, before any data moves and before any node is recorded: wrong list lengths, sizes
//    that do not add up to the input, a dim-0 size not divisible by W for the base variants, a
//    block a row-wise codec cannot encode (not a multiple of row_dim), a codec whose encoded
//    dtype cannot be summed in a reduce-scatter. Not caught locally: arguments that are
//    consistent on each rank but disagree across ranks (say rank 0's batch_size_per_rank says
//    rank 1 gets 2 rows, rank 1's says 3). What the collective underneath then does: the sizes
//    of a reduce-scatter-v / all-gather-v are part of the call's fingerprint, so splits that
//    differ fail with MismatchError on every rank (tested on every transport); an all-to-all
//    whose counts disagree fails with MismatchError on every rank on the local and UCX
//    transports, while under MPI a rank that receives no more than it expects may complete
//    (its peer fails and poisons the group); an all-to-all whose counts happen to agree moves
//    the data as each rank's arguments say.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/group.h>
#include <ferry/collectives/torchrec/comm/qcomm_codec.h>
#include <ferry/runtime/awaitable.h>
#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace ferry::torchrec {

using Codecs = std::optional<QuantizedCommCodecs>;

// ---- alltoall_pooled ----

// torchrec All2AllPooledInfo, without the two *_tensor fields (inputs of a CUDA recat kernel).
struct All2AllPooledInfo {
  All2AllPooledInfo() = default;
  All2AllPooledInfo(std::vector<int64_t> batch_size_per_rank_,
                    std::vector<int64_t> dim_sum_per_rank_)
      : batch_size_per_rank(std::move(batch_size_per_rank_)),
        dim_sum_per_rank(std::move(dim_sum_per_rank_)) {}
  std::vector<int64_t> batch_size_per_rank;  // B_j: samples rank j owns (one per rank)
  std::vector<int64_t> dim_sum_per_rank;     // D_i: embedding columns rank i holds (one per rank)
};

// x: [B_g, D_me], B_g = sum_j B_j, rows [sum_{j<k} B_j, +B_k) are rank k's samples. Output on
// rank me: [B_me, sum_i D_i], Y[b, off_i + c] = X_i[rowstart_me + b, c] (source ranks' columns
// side by side, off_i = sum_{k<i} D_k). Backward: dX_me[rowstart_j + b, c] = G_j[b, off_me + c]
// (the gradient's column blocks sent back), / W when dividing.
Awaitable<Variable> alltoall_pooled(const Variable& a2a_pooled_embs_tensor,
                                    const All2AllPooledInfo& info, const Group& group,
                                    const Codecs& codecs = std::nullopt);

// ---- variable_batch_alltoall_pooled ----

struct VariableBatchAll2AllPooledInfo {
  VariableBatchAll2AllPooledInfo() = default;
  VariableBatchAll2AllPooledInfo(std::vector<std::vector<int64_t>> batch_size_per_rank_per_feature_,
                                 std::vector<int64_t> batch_size_per_feature_pre_a2a_,
                                 std::vector<std::vector<int64_t>> emb_dim_per_rank_per_feature_)
      : batch_size_per_rank_per_feature(std::move(batch_size_per_rank_per_feature_)),
        batch_size_per_feature_pre_a2a(std::move(batch_size_per_feature_pre_a2a_)),
        emb_dim_per_rank_per_feature(std::move(emb_dim_per_rank_per_feature_)) {}
  // [i][f]: samples rank i needs of my local feature f (one list per rank, one entry per
  // feature of mine).
  std::vector<std::vector<int64_t>> batch_size_per_rank_per_feature;
  // Over (owner rank i, feature f of i), flattened: my batch size of that feature.
  std::vector<int64_t> batch_size_per_feature_pre_a2a;
  // [i][f]: embedding dim of rank i's feature f (the same on every rank).
  std::vector<std::vector<int64_t>> emb_dim_per_rank_per_feature;
};

// x: a buffer of sum_i in_split[i] elements (any shape, read flat), in_split[i] =
// sum_f B[i][f] * dim_me[f]; output: 1-D, out_split[i] = sum_f pre_a2a[(i, f)] * dim_i[f]
// elements from each rank i in rank order, each block laid out as its sender wrote it.
// Backward: the swapped exchange, / W when dividing; the gradient has x's shape.
Awaitable<Variable> variable_batch_alltoall_pooled(const Variable& a2a_pooled_embs_tensor,
                                                   const VariableBatchAll2AllPooledInfo& info,
                                                   const Group& group,
                                                   const Codecs& codecs = std::nullopt);

// ---- alltoall_sequence ----

struct All2AllSequenceInfo {
  int64_t embedding_dim = 0;  // D
  // Integer lengths of the ids this rank received in the sparse input dist: uniform batch,
  // [T_local, W*B] (any shape of that many elements: it is viewed as one row per recat entry);
  // variable batch, one entry per (feature, source rank, sample).
  Tensor lengths_after_sparse_data_all2all;
  // Segment permutations (int32 / int64), undefined or empty when this rank has no local
  // feature (T_local = 0): no permutation. sequence_forward_recat / sequence_backward_recat
  // build the uniform-batch ones.
  Tensor forward_recat_tensor;
  Tensor backward_recat_tensor;
  std::vector<int64_t> input_splits;   // ids this rank sent to rank i in the input dist
  std::vector<int64_t> output_splits;  // ids it received from rank i
  bool variable_batch_size = false;    // segments are single length entries (permute_1D)
};

// E: [N_me, D], one row per received id in the KJT order of KJTAllToAll (feature, source rank,
// sample, id); N_me = sum(output_splits) = sum(lengths). Forward: segments of E permuted by
// forward_recat (output segment q = input segment recat[q]), then output_splits[i] rows go to
// rank i and input_splits[i] rows come from rank i. Output: [sum(input_splits), D], the rows in
// the order of the ids of this rank's pre-dist KJT. Backward: the swapped exchange, segments
// permuted back by backward_recat over the permuted lengths, / W when dividing. torchrec
// overwrites info.input_splits / output_splits with the exchanged lists; ferry leaves the info
// alone. The unbucketize permutation of row-wise sharding is a callback
// (unbucketize_permute_callback), as in torchrec's SequenceEmbeddingsAllToAll.
Awaitable<Variable> alltoall_sequence(const Variable& a2a_sequence_embs_tensor,
                                      const All2AllSequenceInfo& info, const Group& group,
                                      const Codecs& codecs = std::nullopt);

// SequenceEmbeddingsAllToAll's recats for T = features_per_rank[me] local features and W
// ranks: forward[j*T + t] = t*W + j (feature-major segments -> rank-major), backward its
// inverse, backward[t*W + j] = j*T + t. int64, empty when T = 0.
Tensor sequence_forward_recat(int64_t local_features, int world_size);
Tensor sequence_backward_recat(int64_t local_features, int world_size);

// The callback SequenceEmbeddingsAllToAll appends under row-wise sharding: output rows
// index-selected by `unbucketize_permute_tensor` (differentiable; int64 / int32 indices).
Awaitable<Variable>::Callback unbucketize_permute_callback(Tensor unbucketize_permute_tensor);

// ---- alltoallv (removed from torchrec in 2024-12, kept for ported code) ----

// torchrec All2AllVInfo: what alltoallv derives from its arguments (all2allv_info).
struct All2AllVInfo {
  std::vector<int64_t> dims_sum_per_rank;  // output columns from each rank
  int64_t B_global = 0;                    // rows of every input
  int64_t B_local = 0;                     // rows of this rank's outputs
  std::vector<int64_t> B_local_list;       // rows per rank: B_g div W, +1 for the first B_g mod W
  std::vector<int64_t> D_local_list;       // columns of each input
  std::vector<int64_t> input_split_sizes;  // elements sent to each rank
  std::vector<int64_t> output_split_sizes; // elements received from each rank
};

// inputs: T >= 1 tensors [B_g, D_t] (this rank's tables, the same B_g). Output dims:
// out_split[i] when given, else per_rank_split_lengths[i] * D_0. Forward: the inputs side by
// side, rows of rank i (B_local_list[i]) sent to rank i; the output is W tensors
// [B_me, dims[i]], one per source rank. Backward: the swapped exchange, columns split back to
// the inputs; NOT divided on the asynchronous path (torchrec's quirk: exact-P whatever the
// switch), divided on the sync path when the switch was on at forward. At W = 1 the op runs
// (records its nodes). Its backward codec works here (torchrec's encodes a tuple and fails).
All2AllVInfo all2allv_info(const std::vector<Variable>& inputs, const Group& group,
                           const std::optional<std::vector<int64_t>>& out_split = std::nullopt,
                           const std::optional<std::vector<int64_t>>& per_rank_split_lengths =
                               std::nullopt);
Awaitable<std::vector<Variable>> alltoallv(
    const std::vector<Variable>& inputs, const Group& group,
    const std::optional<std::vector<int64_t>>& out_split = std::nullopt,
    const std::optional<std::vector<int64_t>>& per_rank_split_lengths = std::nullopt,
    const Codecs& codecs = std::nullopt);

// ---- reduce-scatter / all-gather family ----
// Each takes either its info struct (checked against the inputs) or, as torchrec's functions,
// the arguments it is derived from. Reductions are sums, in the forward codec's dtype; a codec
// whose dtype cannot be summed (INT8, FP8) is refused.

struct ReduceScatterInfo {
  std::vector<Shape> input_sizes;  // the W inputs' shapes
};
// inputs: W tensors, inputs[j] of the same shape on every rank; output: [shape of
// inputs[me]] = sum over ranks of their inputs[me]. Backward: d inputs[j] = G_j (all-gather),
// / W when dividing.
Awaitable<Variable> reduce_scatter_pooled(const std::vector<Variable>& inputs,
                                          const ReduceScatterInfo& info, const Group& group,
                                          const Codecs& codecs = std::nullopt);
Awaitable<Variable> reduce_scatter_pooled(const std::vector<Variable>& inputs,
                                          const Group& group,
                                          const Codecs& codecs = std::nullopt);

struct ReduceScatterBaseInfo {
  Shape input_sizes;  // [W*M, ...]
};
// x: [W*M, ...] (size(0) % W == 0); output [M, ...] = sum over ranks of their block me.
// Backward: blk_j(dx) = G_j (all-gather), / W when dividing.
Awaitable<Variable> reduce_scatter_base_pooled(const Variable& input,
                                               const ReduceScatterBaseInfo& info,
                                               const Group& group,
                                               const Codecs& codecs = std::nullopt);
Awaitable<Variable> reduce_scatter_base_pooled(const Variable& input, const Group& group,
                                               const Codecs& codecs = std::nullopt);

struct ReduceScatterVInfo {
  std::vector<Shape> input_sizes;      // rank j's block of the input: [input_splits[j], ...]
  std::vector<int64_t> input_splits;   // rows per rank along dim 0, the same on every rank
  bool equal_splits = false;           // every split equal: the equal-block collective
  Shape total_input_size;              // the input's shape
};
// x: [sum(input_splits), ...]; output [input_splits[me], ...] = sum over ranks of their block
// me. Backward: blk_j(dx) = G_j (all-gather-v), / W when dividing.
Awaitable<Variable> reduce_scatter_v_pooled(const Variable& input, const ReduceScatterVInfo& info,
                                            const Group& group,
                                            const Codecs& codecs = std::nullopt);
Awaitable<Variable> reduce_scatter_v_pooled(const Variable& input,
                                            const std::vector<int64_t>& input_splits,
                                            const Group& group,
                                            const Codecs& codecs = std::nullopt);
// x: 1-D (read flat) of sum_r s_r elements, s_r = sum_f B[r][f] * embedding_dims[f]; as
// reduce_scatter_v_pooled on those element splits, output [s_me].
Awaitable<Variable> reduce_scatter_v_per_feature_pooled(
    const Variable& input, const std::vector<std::vector<int64_t>>& batch_size_per_rank_per_feature,
    const std::vector<int64_t>& embedding_dims, const Group& group,
    const Codecs& codecs = std::nullopt);

struct AllGatherBaseInfo {
  Shape input_size;  // [M, ...], the same on every rank
};
// x: [M, ...]; output [W*M, ...], rank j's x in block j. Backward: dx_me = sum_r blk_me(G_r)
// (reduce-scatter), / W when dividing.
Awaitable<Variable> all_gather_base_pooled(const Variable& input, const AllGatherBaseInfo& info,
                                           const Group& group,
                                           const Codecs& codecs = std::nullopt);
Awaitable<Variable> all_gather_base_pooled(const Variable& input, const Group& group,
                                           const Codecs& codecs = std::nullopt);

}  // namespace ferry::torchrec
