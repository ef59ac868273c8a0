// Distributed gradcheck: the multi-rank backward of a distributed computation against float64
// central finite differences of the global objective.
//
// SPMD: every rank of `group` calls it with the same function and its own inputs. The function
// returns this rank's outputs y_r (it may run collectives on the group). Each rank draws
// pseudo-random weights W_r of its outputs' shapes; the objective is
//   Sum        L = sum_r <W_r, y_r>              (convention P, the default)
//   Mean       L = (1/W) sum_r <W_r, y_r>        (P divided by the group size)
//   Replicated L = (1/W) sum_r <W, y_r>, the same W on every rank, each rank's backward seeded
//              with W: the once-counted loss of a replicated computation (convention R; equal
//              to <W, y_0> when the outputs agree on every rank).
// Analytic: one backward on every rank. Numeric: for every element of every rank's inputs in
// turn, the owner perturbs it by +-eps (with replicated_inputs, every rank perturbs the same
// element of its identical copy), all ranks recompute their outputs with recording off, and
// the objective is summed with an all_reduce. The result is the same on every rank: the
// worst element over all ranks.
#pragma once

#include <ferry/autograd/gradcheck.h>
#include <ferry/collectives/group.h>

namespace ferry {

enum class GradcheckObjective { Sum, Mean, Replicated };

struct DistributedGradcheckOptions {
  GradcheckOptions tolerances;
  GradcheckObjective objective = GradcheckObjective::Sum;
  bool replicated_inputs = false;  // inputs identical on every rank, perturbed together
};

struct DistributedGradcheckResult : GradcheckResult {
  int worst_rank = -1;
};

// `inputs` are float64 on every rank, the same count on every rank (shapes may differ).
DistributedGradcheckResult distributed_gradcheck(const DifferentiableFn& fn,
                                                 const std::vector<Tensor>& inputs,
                                                 const Group& group,
                                                 const DistributedGradcheckOptions& options = {});

}  // namespace ferry
