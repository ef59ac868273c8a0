// towhee's two all-gather autograd Functions (`towhee.models.drl.until_module.AllGather` and
// `AllGather2`), as ferry differentiable ops.
//
// Both: x is [B, ...] on every rank (the same B, the same trailing shape), y = every rank's x
// concatenated along dim 0 in rank order, [W*B, ...], the same on every rank.
//
// Adjoint convention of each backward (P = per-rank, R = replicated; differentiable.h):
//   all_gather   (AllGather)   R        dx_me = G_me[B*me : B*(me+1)], rows of the LOCAL
//                                       gradient, no communication
//   all_gather2  (AllGather2)  exact-P  dx_me = sum_r G_r[B*me : B*(me+1)] (a reduce_scatter)
// Check them with distributed_gradcheck under GradcheckObjective::Replicated / ::Sum.
//
// Departures from the original:
//  - towhee slices the gradient with `args.local_rank`, which is wrong on more than one node
//    (W=4 on 2 nodes: ranks 2 and 3 get rows 0-1 and 2-3). ferry uses the rank inside
//    `group`, so every rank gets its own rows. There is no `args`: W is group.size(), and the
//    group may be any group, not only the world.
//  - Equal batch sizes are checked instead of assumed: before the data moves, every rank's
//    (dims, rows, elements per row, a fingerprint of the row shape) are exchanged with one
//    small all_gather of int64, and if
//    any differ every rank raises the same InvalidArgument listing each rank's sizes (towhee
//    fails or hangs inside its all_gather). That costs one extra tiny collective per call at
//    W > 1; it is needed because each rank only knows its own batch and the raw all_gather
//    does not compare sizes across ranks.
//  - AllGather2's backward is one reduce_scatter rather than an all_reduce of the whole
//    gradient followed by the slice: the same sums, 1/W of the data moved; only the order of
//    the floating-point additions may differ.
//  - W == 1: the identity forward and backward, as towhee (y is a new variable sharing nothing
//    with x but equal to it; no exchange is made).
//  - Inputs are float32 / float64 Variables with at least one dimension (towhee reads
//    tensor.shape[0]); a 0-d input is an InvalidArgument.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/group.h>

namespace ferry::towhee {

// AllGather: y = cat_k x_k along dim 0; backward dx_me = rows [B*me, B*(me+1)) of G_me (R).
Variable all_gather(const Variable& x, const Group& group);

// AllGather2: the same forward; backward dx_me = rows [B*me, B*(me+1)) of sum_r G_r (exact-P).
Variable all_gather2(const Variable& x, const Group& group);

}  // namespace ferry::towhee
