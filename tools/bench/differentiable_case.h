// ferry-bench --differentiable: one forward + backward of a differentiable collective
// (collectives/differentiable.h) against the two raw collectives it is made of, called by hand
// on preallocated buffers: all_reduce + all_reduce for all_reduce, all_gather + reduce_scatter
// for all_gather. The difference is what the autograd layer costs: the tape, a Variable, and
// the output and gradient tensors it allocates per step.
#pragma once

#include <ferry/ferry.h>
#include "tools/bench/launcher.h"
#include "tools/bench/ops.h"

#include <memory>
#include <string>

namespace ferry::bench {

// True for the ops --differentiable measures (all_reduce, all_gather).
bool has_differentiable_form(OpKind op);

class DifferentiableCase {
 public:
  // `count` as element_count() gives it: the tensor (all_reduce) or the gathered output.
  DifferentiableCase(OpKind op, int64_t count, DType dtype, const Group& group);

  // y = op(x) with x requiring grad, then y.backward(G): two collectives through the tape.
  // `keep`: hold on to y and x.grad() for check(); timed runs let them go at the end of the
  // step, as a training step would, so the next step reuses their blocks.
  void run_autograd(bool keep = false);
  // The same two collectives, raw, into buffers allocated once.
  void run_raw();
  // The raw pair as the timed baseline (its barrier is ferry's own, as for the autograd side).
  std::unique_ptr<Baseline> raw_baseline();

  // After one run of each: empty when the autograd forward and gradient equal the raw ones and
  // the values are the expected sums, else what differs.
  std::string check() const;

 private:
  OpKind op_;
  Group group_;
  Tensor x_, upstream_;        // this rank's input and the upstream gradient G
  Tensor y_raw_, dx_raw_;      // run_raw's outputs
  Tensor y_autograd_, dx_autograd_;  // run_autograd(keep)'s outputs
};

}  // namespace ferry::bench
