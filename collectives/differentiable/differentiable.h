// Differentiable collectives: the raw collectives as autograd Functions, with the adjoint
// convention explicit (P or R, below).
//
// Adjoint::PerRank (convention P, the default): every rank's input is its own variable and the
// objective is the sum of the per-rank losses, L = sum_r L_r(y_r). The backward is the true
// adjoint of the forward: all_reduce <-> all_reduce, all_gather <-> reduce_scatter,
// all_to_all <-> all_to_all with the splits swapped, broadcast <-> reduce, scatter <-> gather.
//
// Adjoint::Replicated (convention R, Megatron style): the output is bit-identical on every
// rank and the computation downstream of it is replicated, so the loss is counted once (every
// rank computes the same L and seeds the same gradient). Each input then receives the gradient
// of that single loss, computed from this rank's own upstream gradient without any reduction
// over ranks: all_reduce sum -> identity, all_gather -> my block of my own gradient,
// broadcast -> the root keeps its own gradient. Only the ops whose output is replicated take
// an Adjoint; for the others (reduce_scatter, all_to_all, scatter, gather) every rank's output
// differs, the two conventions coincide, and the backward is the P adjoint.
//
// Every rank of the group must call these in the same order, with the input's requires_grad
// the same on every rank: a rank whose input does not require grad records no node, runs no
// backward collective, and its peers wait for it until their deadline. The tape runs a
// recorded collective's backward even on a rank whose loss ignores its output, provided that
// loss was recorded after the collective (ferry::backward forces the unrun collective nodes
// recorded before its newest root; a loss computed earlier than the collective leaves it out,
// and the peers wait). Inputs are float32 or float64. Sizes ("splits",
// "sizes") count rows along dim 0. Bad arguments raise InvalidArgument on the calling rank
// before any data moves.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/group.h>
#include <ferry/runtime/reduce_op.h>

#include <cstdint>
#include <vector>

namespace ferry {

enum class Adjoint { PerRank, Replicated };

const char* adjoint_name(Adjoint adjoint);  // "per-rank" / "replicated"

// Forward identity, backward sum all_reduce of the gradients: x is one logical variable
// replicated on every rank, and each copy receives the gradient of the whole objective
// (Megatron's "f", fairchem's CopyToModelParallelRegion, poptorch's all_reduce with
// insert_in_grad_graph). Returns a new variable sharing x's values.
Variable replicate(const Variable& x, const Group& group);

// y_r = reduce_k x_k on every rank (any shape).
//   Sum: P dx_k = sum_r G_r;        R dx_k = G_k.
//   Avg: P dx_k = (1/W) sum_r G_r;  R dx_k = G_k / W.
//   Max / Min: the gradient goes to the rank holding the extreme, element by element; when
//   several ranks hold it (a tie), the lowest group rank among them takes all of it and the
//   others get zero. P dx_k = [k wins] sum_r G_r; R dx_k = [k wins] G_k. Finding the winner
//   costs one more all_reduce (min of int32 ranks) in forward, only when x requires grad.
//   An element that is NaN on some rank has no winner: every rank gets zero there.
//   Product is refused (InvalidArgument).
Variable all_reduce(const Variable& x, const Group& group, ReduceOp op = ReduceOp::Sum,
                    Adjoint adjoint = Adjoint::PerRank);

// x: [m, ...] on every rank (the same m); y: [W*m, ...], rank k's input in block k.
//   P dx_k = sum_r blk_k(G_r) (a reduce_scatter); R dx_k = blk_k(G_k).
Variable all_gather(const Variable& x, const Group& group, Adjoint adjoint = Adjoint::PerRank);

// Uneven: rank k contributes x_k: [n_k, ...] (the trailing shape equal on every rank); the row
// counts are exchanged first (one all_gather of int64). y: [sum n_k, ...] in rank order.
// Backward as all_gather, with the blocks cut at the exchanged counts (a reduce_scatter_v).
Variable all_gather_v(const Variable& x, const Group& group, Adjoint adjoint = Adjoint::PerRank);

// x: [W*m, ...]; y_r = sum_k blk_r(x_k): [m, ...]. dx_k: blk_j(dx_k) = G_j (an all_gather).
Variable reduce_scatter(const Variable& x, const Group& group);

// x: [sum(sizes), ...]; y_r = sum_k blk_r(x_k; sizes): [sizes[r], ...]. `sizes` is the same on
// every rank. Backward: an all_gather_v of the gradients at `sizes`.
Variable reduce_scatter_v(const Variable& x, const std::vector<int64_t>& sizes,
                          const Group& group);

// Equal splits: x and y are [W*m, ...]; block j of x goes to rank j. Backward: the same
// all_to_all of the gradients (equal splits make it its own transpose).
Variable all_to_all_single(const Variable& x, const Group& group);

// torch.distributed order: input_split_sizes[j] rows of x go to rank j; output_split_sizes[k]
// rows of y come from rank k. Backward: the all_to_all of the gradients with the two lists
// swapped.
Variable all_to_all_single(const Variable& x, const std::vector<int64_t>& output_split_sizes,
                           const std::vector<int64_t>& input_split_sizes, const Group& group);

// y_r = x_root on every rank (x of the same shape everywhere; only root's values are read).
//   P dx_root = sum_r G_r (a reduce to root); R dx_root = G_root. dx of every other rank is 0.
Variable broadcast(const Variable& x, int root, const Group& group,
                   Adjoint adjoint = Adjoint::PerRank);

// On root, x is [W*m, ...] and block k goes to rank k; y_r: [m, ...]. On the other ranks x
// only gives the output's shape [m, ...]: its values are not read and it gets no gradient, but
// it must require grad wherever root's x does (the rule above).
// Backward: the gradients are gathered to root's dx (block k = G_k).
Variable scatter(const Variable& x, int root, const Group& group);

// x: [m, ...] on every rank (the same m). On root y: [W*m, ...] with rank k's x in block k; on
// the other ranks y is an empty [0, ...] placeholder that keeps them in the backward.
// Backward: root's gradient is scattered, dx_k = blk_k(G_root).
Variable gather(const Variable& x, int root, const Group& group);

}  // namespace ferry
