// GradientReducer: data-parallel gradient averaging in buckets, overlapped with backward (the
// job of torch's DistributedDataParallel or Horovod's DistributedOptimizer, for ferry's tape).
//
//   ferry::GradientReducer ddp(model.params, world);   // checks every rank registered the same
//   ddp.broadcast_parameters();                        // replicas start from rank 0's values
//   for (...) {
//     loss(batch).backward();   // buckets are all-reduced while backward still runs
//     ddp.finish();             // waits, writes the averages into every parameter's grad()
//     optimizer.step();
//     optimizer.zero_grad();
//   }
//
// How it works. The parameters are laid out, in reverse registration order (backward reaches
// the last layers first), into buckets of at most `bucket_cap_bytes` each and of a single dtype
// (a parameter larger than the cap has a bucket of its own). A post-accumulate hook on every
// parameter marks it ready when backward has finished its gradient. When every parameter of a
// bucket is ready, and every earlier bucket has been launched, the bucket's gradients are copied
// into one flat buffer and an asynchronous all_reduce (ReduceOp::Avg by default) is started on
// it, kept moving while nobody waits for it (Work::progress_in_background) as backward goes on
// with earlier layers. Buckets are always launched in bucket order, so every rank issues the
// same collectives in the same order whatever order its gradients arrived in. finish() launches
// what is left, waits for every bucket and copies the averages back into the parameters'
// grad() (in place when the parameter has one).
//
// Parameters without a gradient this step (unused by this rank's loss): their slot in the
// bucket holds zeros, so the average still counts this rank (as torch's DDP does). By default
// every parameter has a grad() after finish(), the average over the ranks (zeros where no rank
// had one). With `find_unused_parameters`, finish() also all-reduces one flag per parameter
// (one more small collective per step) and a parameter that no rank had a gradient for keeps
// an undefined grad(), so optimizers skip it as a single process would.
//
// Gradient accumulation: while a NoSyncGuard from no_sync() is alive, backward only accumulates
// into grad() locally and nothing is communicated; the first synchronized backward and finish()
// after it reduce the accumulated gradients.
//
// Contract. Every rank of the group constructs the reducer with the same parameters (dtype and
// shape, in the same order) and the same options: the constructor checks it with one
// all_gather of a fingerprint and throws MismatchError on every rank naming the first rank that
// differs from rank 0 and what differs. Every rank runs the same number of synchronized
// backwards and finish() calls. Parameters are leaf Variables requiring grad, distinct, of a
// floating dtype. A backward that reaches a parameter whose bucket was already launched this
// step (two backwards without finish() between them, outside no_sync) throws InvalidArgument.
// Errors of the collectives (TimeoutError at FERRY_TIMEOUT, PeerFailure, MismatchError) are
// rethrown by finish() (or by backward, if launching a bucket fails at once); the group is
// then poisoned and the step is abandoned (the reducer is reset for the next step).
// Not thread-safe: the rank's thread that runs backward owns the reducer. The hooks stay on
// the parameters after the reducer is destroyed, and then do nothing.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/group.h>
#include <ferry/runtime/reduce_op.h>
#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace ferry {

struct GradientReducerOptions {
  // Largest bucket, in bytes of gradient (torch's DDP default: 25 MiB). 0 or less: one bucket
  // per parameter.
  int64_t bucket_cap_bytes = int64_t{25} << 20;
  // Avg (the default) or Sum over the group.
  ReduceOp reduce_op = ReduceOp::Avg;
  // See above: parameters without a gradient on every rank keep grad() undefined.
  bool find_unused_parameters = false;
};

// One bucket: which parameters (indices into the registration order, in bucket order, i.e.
// reverse registration order), their dtype, its size.
struct GradientBucketInfo {
  std::vector<size_t> parameters;
  DType dtype = DType::Float32;
  int64_t numel = 0;
  int64_t nbytes = 0;
};

class GradientReducer {
 public:
  // Collective (one all_gather on `group`): every rank must call it, see the contract above.
  // Throws InvalidArgument for an empty or invalid group, a non-leaf, a parameter that does not
  // require grad, a duplicate or a non-floating dtype; MismatchError when ranks disagree.
  GradientReducer(std::vector<Variable> parameters, Group group,
                  GradientReducerOptions options = {});
  ~GradientReducer();
  GradientReducer(GradientReducer&&) noexcept;
  GradientReducer& operator=(GradientReducer&&) noexcept;
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Collective: overwrites every parameter's value with root's (one broadcast per bucket).
  void broadcast_parameters(int root = 0);

  // Collective: launches the buckets not launched yet, waits for all of them and writes the
  // reduced gradients into the parameters' grad(). A no-op inside no_sync(). Rethrows the first
  // collective's error.
  void finish();

  struct State;  // internal

  // While the guard lives, backward does not communicate (gradient accumulation). Guards nest.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(GradientReducer& reducer);
    ~NoSyncGuard();
    NoSyncGuard(NoSyncGuard&& other) noexcept : state_(std::move(other.state_)) {}
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(NoSyncGuard&&) = delete;

   private:
    std::shared_ptr<State> state_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }
  bool syncing() const;

  // Introspection (tests, logging).
  const std::vector<Variable>& parameters() const;
  const std::vector<GradientBucketInfo>& buckets() const;
  // Buckets launched since the last finish() (they are launched in order: 0 .. n-1).
  size_t buckets_launched() const;
  const Group& group() const;
  const GradientReducerOptions& options() const;

 private:
  std::shared_ptr<State> state_;
};

// torch's name for the same thing.
using DistributedDataParallel = GradientReducer;

}  // namespace ferry
