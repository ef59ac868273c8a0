// torchrec's module-level switches of comm_ops and CommOpGradientScaling.
//
// Gradient division (torchrec GRADIENT_DIVISION, default true): when on, the backward of every
// comm op divides the gradient it received by the group size W, after decoding, so the result is
// the adjoint of the mean objective (1/W) sum_r L_r, the scale DDP gives the dense parameters
// (torchrec: "make it equivalent to running on a single rank"). The asynchronous ops read the
// switch when their backward runs (at the Req node); the synchronous path (sync collectives
// below) captures it when the forward runs. The legacy alltoallv ignores it on the asynchronous
// path (alltoallv.h).
//
// Sync collectives (torchrec USE_SYNC_COLLECTIVES, default false): when on, an op runs its
// collective at once and returns a NoWait of the result, with the same values and gradients as
// the asynchronous path. (torchrec also turns it on while torch.compile traces; ferry has no
// tracer.)
//
// Both switches are process-wide atomics, as torchrec's globals: ranks that run as threads of
// one process (the local transport) share them, so ranks should flip them at a point where no
// rank is between a forward and its backward. UseSyncCollectivesScope, torchrec's context
// manager torchrec_use_sync_collectives(), is the exception: its effect is limited to the
// calling thread (a context manager is lexically scoped; a process-wide save/restore would let
// rank threads that enter and leave at different moments restore each other's values).
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/group.h>

#include <cstdint>
#include <optional>

namespace ferry::torchrec {

void set_gradient_division(bool val);
bool get_gradient_division();

// Process-wide; see also UseSyncCollectivesScope.
void set_use_sync_collectives(bool val);
// The calling thread's scope if it is inside one, else the process-wide value.
bool get_use_sync_collectives();

// torchrec_use_sync_collectives(): while alive, get_use_sync_collectives() is `enabled` on this
// thread; the previous state comes back at destruction. Scopes nest.
class UseSyncCollectivesScope {
 public:
  explicit UseSyncCollectivesScope(bool enabled = true);
  ~UseSyncCollectivesScope();
  UseSyncCollectivesScope(const UseSyncCollectivesScope&) = delete;
  UseSyncCollectivesScope& operator=(const UseSyncCollectivesScope&) = delete;

 private:
  std::optional<bool> previous_;
};

// torchrec CommOpGradientScaling.apply(x, scale_gradient_factor): forward identity (the output
// shares x's values), backward multiplies the gradient by scale_gradient_factor. torchrec
// applies it to the per-id weights of weighted features, which DDP already averages, with the
// factor W when gradient division is on (and 1 otherwise) so that the embedding comm op's
// division does not shrink their gradient twice. A factor of 1 records nothing and returns x.
// Throws InvalidArgument for a factor < 1 or a non-float input.
Variable comm_op_gradient_scaling(const Variable& x, int64_t scale_gradient_factor);
// The same with the factor torchrec's lookups compute: group.size() when get_gradient_division()
// is on at this call, else 1.
Variable comm_op_gradient_scaling(const Variable& x, const Group& group);

}  // namespace ferry::torchrec
