// fairchem's model-parallel regions (gp_utils, Megatron style; spec §1.6-1.10) as
// differentiable ferry functions.
//
// Generation followed: G3 semantics (out-of-place ReduceFrom, scatter returns an independent
// copy, GatherFromModelParallelRegionSumGrad and ScaleBackwardGrad exist, canonical array_split
// partition) along ANY dim, negative dims counting from the back; `dim` defaults to -1 like
// fairchem's wrappers (fairchem's models pass 0).
//
// Every op takes the graph-parallel group explicitly (`gp`, usually GraphParallel::gp_group());
// the overloads taking a GraphParallel use its GP group and throw InvalidArgument when it is not
// initialized, as fairchem's wrappers assert initialized(). Every rank of the group must call
// the same ops in the same order, and every rank then runs their backward (ferry's tape runs a
// collective node's backward even where the loss ignores its output, if the loss was recorded
// after it: see collectives/differentiable.h).
//
// Adjoint convention of each backward (spec §0, §1.10):
//   copy_to        R  forward identity; backward sum all_reduce of G (x replicated).
//   reduce_from    R  forward sum all_reduce (a new tensor); backward identity.
//   scatter_to     R  forward my canonical part of x along dim (x replicated); backward the full
//                     gradient, every rank's G concatenated in rank order, on every rank.
//   gather_from    R  forward the concatenation of every rank's x along dim; backward my
//                     canonical slice of MY OWN G (correct when the downstream computation is
//                     replicated; under P it misses sum_{r != me} G_r[my slice]).
//   gather_from_model_parallel_region_sum_grad
//                  P  forward as gather_from; backward sum_r G_r[my slice] (a reduce_scatter_v).
//   scale_backward_grad  neither: a deliberate rescale, forward identity, backward G * gp size.
//
// Departures from fairchem, on purpose:
//  - Non-canonical sizes in gather_from / _sum_grad (the per-rank sizes along dim are not the
//    canonical partition of their total) raise InvalidArgument on every rank, before the data
//    moves, naming the sizes given and expected; fairchem gives a silently wrong gradient on one
//    rank and a shape error on another (spec §1.9, TC6). The ranks must also agree on the size
//    of every other dim (also InvalidArgument on every rank).
//  - ReduceFrom is out of place (G3) in every case; G1/G2 overwrite the caller's tensor.
//  - Nothing is padded on the wire: after the size exchange (one all_gather of two int64 per
//    rank: the size along dim and a fingerprint of the other dims) the gathers move exactly
//    the elements that exist (an all_gather_v, of the flattened tensors for dims other than 0),
//    so padding contents never matter. scatter_to's backward knows the sizes (the canonical
//    partition of x's length) and skips the exchange.
//  - A tensor that is empty on every rank returns the empty result and empty gradients at once
//    (the original hangs on a zero-byte all_gather under gloo).
//  - No process-global group (see graph_parallel.h).
// scatter_to, gather_from and _sum_grad are collective nodes (ferry::Function::is_collective):
// their backward runs on every rank even where the loss ignores their output.
// Group size 1: every op is the identity in both directions. Inputs are float32 or float64;
// bad arguments raise InvalidArgument naming the op and the rank.
#pragma once

#include "autograd/variable.h"
#include "collectives/graph_parallel.h"
#include "collectives/group.h"

#include <cstdint>

namespace ferry {

// fairchem's _gather_with_padding, not differentiable: every rank's x concatenated along `dim`
// in rank order, whatever each rank's size along `dim` (no canonical partition needed); the
// other dims must agree (else InvalidArgument on every rank). The sizes are exchanged first;
// nothing is padded on the wire (see above). Any dtype.
Tensor gather_with_padding(const Tensor& x, const Group& group, int64_t dim = -1);

Variable copy_to_model_parallel_region(const Variable& x, const Group& gp);
Variable reduce_from_model_parallel_region(const Variable& x, const Group& gp);
Variable scatter_to_model_parallel_region(const Variable& x, const Group& gp, int64_t dim = -1);
Variable gather_from_model_parallel_region(const Variable& x, const Group& gp, int64_t dim = -1);
Variable gather_from_model_parallel_region_sum_grad(const Variable& x, const Group& gp,
                                                    int64_t dim = -1);
Variable scale_backward_grad(const Variable& x, const Group& gp);

Variable copy_to_model_parallel_region(const Variable& x, const GraphParallel& gp);
Variable reduce_from_model_parallel_region(const Variable& x, const GraphParallel& gp);
Variable scatter_to_model_parallel_region(const Variable& x, const GraphParallel& gp,
                                          int64_t dim = -1);
Variable gather_from_model_parallel_region(const Variable& x, const GraphParallel& gp,
                                           int64_t dim = -1);
Variable gather_from_model_parallel_region_sum_grad(const Variable& x, const GraphParallel& gp,
                                                    int64_t dim = -1);
Variable scale_backward_grad(const Variable& x, const GraphParallel& gp);

}  // namespace ferry
