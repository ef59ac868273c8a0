// ksuit's gather / reduce helpers (`ksuit.distributed.gather` and the two Functions of
// `ksuit.distributed.functional`, as vendored in NX-AI/vision-lstm), as ferry ops.
//
// ksuit always uses the world group and the global rank; here every op takes a `group` and uses the
// rank inside it (the later variant of AllGatherGradAutograd that takes a group). Every rank of the
// group must call these in the same order, and then run a backward that reaches them (see
// ferry::backward). As in ksuit, every rank must pass the same shape to a gather; that is not
// compared across ranks (it would cost one more collective per call).
//
// Adjoint convention of each backward (P = per-rank, R = replicated; differentiable.h):
//   all_gather_grad            exact-P  dx_me = sum_r G_r[slot me]
//   all_gather_grad_autograd   exact-P  (all_gather_grad along dim 0)
//   all_gather_grad_overwrite  R        dx_me = G_me[slot me] (only the local slot carries grad)
//   all_reduce_sum_grad        R        dx_me = G_me      (the identity: see below)
//   all_reduce_mean_grad       R        dx_me = G_me / W
//   *_nograd                   none     the result does not require grad
// Check them with distributed_gradcheck under GradcheckObjective::Sum (P) or ::Replicated (R).
//
// all_reduce_sum_grad / all_reduce_mean_grad: ksuit calls the plain in-place dist.all_reduce, not
// the differentiable torch.distributed.nn one, although its comment calls it differentiable. Under
// PyTorch 1.13 (observed; tests/families/test_ksuit.cpp) autograd does not see that collective, so the
// backward is the identity (mean: G/W). That observed behaviour is what these implement: it is the
// gradient the original computes, and it is the correct one for a loss computed identically on
// every rank and counted once (R, like fairchem's ReduceFrom). The true P adjoint (dx = sum_r G_r)
// is ferry::all_reduce(x, group).
//
// Departures from the original:
//  - ksuit's _prepare_tensor does not apply: there are no Python scalars or lists to wrap, no
//    device to move to, and no gloo dtype juggling (bool and bfloat16 sent as float32): ferry's
//    collectives move every dtype as it is. The differentiable ops take float32 / float64; the
//    nograd ones take any dtype (all_reduce_mean_nograd: floating dtypes only, where torch
//    would promote an integer sum to float on division).
//  - ferry has no "not distributed" mode: W == 1 behaves as a distributed ksuit run with one
//    rank. The results are those of ksuit's non-distributed path (0-d inputs unsqueezed to
//    [1]) except all_gather_nograd_clipped, which still keeps the first max_length rows (ksuit
//    clips only when distributed; its reordering is the identity at W == 1 either way).
//  - all_gather_grad returns the concatenation directly; the tuple of W slots of
//    AllGatherGradAutograd is an internal step (its slot gradients are the same).
//  - all_gather_grad_overwrite returns what ksuit's does, one tensor [W*n, ...]: ksuit gathers
//    into a list, overwrites its local slot with x itself and concatenates the list along dim 0
//    (its wrapper), so the gradient reaches x only through the rows of the local slot. ferry
//    builds no list: it is the R all_gather (ferry::all_gather, Adjoint::Replicated).
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/group.h>

#include <cstdint>

namespace ferry::ksuit {

// Forward: every rank's x (a 0-d x is first unsqueezed to [1]) concatenated in rank order
// along `batch_dim` (any dim of the unsqueezed x; negative counts from the back): W*n along
// batch_dim. Backward (exact-P): dx_me = sum_r of the block of G_r that holds x_me.
Variable all_gather_grad(const Variable& x, const Group& group, int64_t batch_dim = 0);

// ksuit's all_gather_grad_autograd: all_gather_grad along dim 0 (ksuit's has no batch_dim).
Variable all_gather_grad_autograd(const Variable& x, const Group& group);

// The same forward as all_gather_grad_autograd (a 0-d x gives [W]; otherwise [W*n, ...] along
// dim 0). Backward (R): dx_me = the rows of G_me that hold x_me, this rank's own gradient only;
// no communication in backward.
Variable all_gather_grad_overwrite(const Variable& x, const Group& group);

// No gradient. A 0-d x gives a 1-D [W]; otherwise the concatenation along dim 0, [W*n, ...].
// Any dtype.
Variable all_gather_nograd(const Variable& x, const Group& group);

// No gradient. Undoes the round-robin assignment of a distributed sampler: with every rank
// holding L rows (a 0-d x counts as [1]), output row l*W + w is rank w's row l, i.e.
// (W, L, ...) -> (L, W, ...) flattened to (L*W, ...). Then keeps the first max_length rows
// (all of them when max_length >= L*W: that drops the sampler's padding). max_length < 0 is an
// InvalidArgument, raised before any data moves. Any dtype.
Variable all_gather_nograd_clipped(const Variable& x, const Group& group, int64_t max_length);

// y = sum_r x_r on every rank; backward identity (see the header comment).
Variable all_reduce_sum_grad(const Variable& x, const Group& group);
// y = (sum_r x_r) / W on every rank; backward G / W.
Variable all_reduce_mean_grad(const Variable& x, const Group& group);
// The same values, no gradient. sum: any dtype; mean: floating dtypes.
Variable all_reduce_sum_nograd(const Variable& x, const Group& group);
Variable all_reduce_mean_nograd(const Variable& x, const Group& group);

}  // namespace ferry::ksuit
