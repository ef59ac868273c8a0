// The cross-replica collectives of Graphcore's poptorch-experimental-addons
// (`poptorch_experimental_addons.collectives`), as ferry differentiable ops.
//
// On the IPU every replica runs the same program and "rank" is the replica index; here the
// replicas are the ranks of `group` and the replica index is the group rank. Every rank of the
// group must call these in the same order (and then run a backward that reaches them, see
// ferry::backward). Inputs are float32 or float64 Variables of the same shape on every replica
// (as on the IPU, where every replica runs the same program; not compared across ranks). Bad
// arguments raise InvalidArgument on the calling rank before any data moves.
//
// Adjoint convention of each backward (P = per-rank, R = replicated; differentiable.h):
//   all_gather_cross_replica                     exact-P  dx_me = sum_r G_r[me]
//   all_gather_cross_replica_identical_grads_in  R        dx_me = G_me[me]
//   all_reduce_cross_replica_sum (default)       R        dx_me = G_me       (Megatron "g")
//   all_reduce_cross_replica_sum (insert_in_grad_graph)
//                                                R        dx_me = sum_r G_r  (Megatron "f")
//   all_to_all_single_cross_replica              exact-P  the same all-to-all of the G's
// Check them with distributed_gradcheck under GradcheckObjective::Sum (P), ::Replicated (R),
// and ::Sum with replicated_inputs for insert_in_grad_graph (its input is one logical variable
// replicated on every rank).
//
// Departures from the original:
//  - `replication_factor` is not an argument: it is group.size(), and the replicas can be any
//    group, not only "all replicas" (PopART's grouping [R, 1, R]).
//  - all_gather_cross_replica is not built as identical_grads_in followed by an
//    insert_in_grad_graph all_reduce of the whole (R, ...) gradient and a local slot selection:
//    its backward is one reduce_scatter, which gives each rank the same sum_r G_r[me] while
//    moving 1/R of the data. Only the order of the floating-point additions may differ.
//  - Dtypes: float32 / float64 (the differentiable ops' set); PopART also took float16 and
//    (u)int32. PopART's OpToIdentity pattern has no counterpart: insert_in_grad_graph is always
//    honoured.
//  - An all_to_all whose leading axis is not divisible by R, or a 0-d input, raises
//    InvalidArgument naming the op, the rank, the size and R (PopART failed at compile time).
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/group.h>

namespace ferry::poptorch {

// x: any shape s (0-d included) -> y: (R, *s) on every rank, slot k = replica k's x.
// Backward (exact-P): dx_me = sum_r G_r[me] (a reduce_scatter).
Variable all_gather_cross_replica(const Variable& x, const Group& group);

// Forward as all_gather_cross_replica. Backward (R, "assumes gradient inputs are identical"):
// dx_me = G_me[me], slot me of this rank's own gradient, no communication.
Variable all_gather_cross_replica_identical_grads_in(const Variable& x, const Group& group);

// insert_in_grad_graph = false: y = sum_r x_r on every rank, backward identity (dx_me = G_me).
// insert_in_grad_graph = true: y = x (a new variable sharing x's values), backward
// dx_me = sum_r G_r (the all-reduce moved into the gradient graph).
// Any shape; shapes are unchanged.
Variable all_reduce_cross_replica_sum(const Variable& x, const Group& group,
                                      bool insert_in_grad_graph = false);

// x: [R*m, ...] on every rank (the same m); chunk j of the leading axis goes to replica j and
// output chunk i is what replica i sent. Output shape = input shape. Backward (exact-P): the
// same all-to-all of the gradients (equal chunks make it its own transpose).
Variable all_to_all_single_cross_replica(const Variable& x, const Group& group);

}  // namespace ferry::poptorch
