// Differentiable collectives (the first two; the full family arrives with its own issue).
//
// Adjoint convention P (spec §0): every rank's input is its own variable and the objective is
// the sum of the per-rank losses, L = sum_r L_r(y_r). Every rank of the group must call these
// in the same order, and every rank must then run a backward that reaches them (the tape runs
// a collective's backward even on a rank whose loss ignores its output, see ferry::backward).
#pragma once

#include "autograd/variable.h"
#include "collectives/group.h"

namespace ferry {

// y_r = sum_k x_k on every rank. Backward: dx_k = sum_r G_r (an all_reduce of the gradients).
// The input may be of any shape; float32 or float64.
Variable all_reduce(const Variable& x, const Group& group);

// x: [m, ...] on every rank (the same m); y: [W*m, ...] with rank k's input in block k.
// Backward: dx_k = sum_r block_k(G_r) (a reduce_scatter of the gradients).
Variable all_gather(const Variable& x, const Group& group);

}  // namespace ferry
