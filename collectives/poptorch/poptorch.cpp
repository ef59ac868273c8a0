#include <ferry/collectives/poptorch/poptorch.h>

#include <ferry/autograd/ops.h>
#include <ferry/collectives/differentiable/differentiable.h>
#include <ferry/collectives/differentiable/checks.h>
#include <ferry/runtime/error.h>

namespace ferry::poptorch {

namespace {

// x viewed as one row [1, *s], gathered along dim 0 into [R, *s]: slot k is replica k's x.
// The reshape is poptorch's "no-op reshape" that makes the gradient come back in x's shape.
Variable stack_replicas(const Variable& x, const Group& group, Adjoint adjoint) {
  Shape row{1};
  row.insert(row.end(), x.shape().begin(), x.shape().end());
  return ferry::all_gather(reshape(x, row), group, adjoint);
}

}  // namespace

Variable all_gather_cross_replica(const Variable& x, const Group& group) {
  detail::check_differentiable_input(x, group, "all_gather_cross_replica");
  return stack_replicas(x, group, Adjoint::PerRank);
}

Variable all_gather_cross_replica_identical_grads_in(const Variable& x, const Group& group) {
  detail::check_differentiable_input(x, group, "all_gather_cross_replica_identical_grads_in");
  return stack_replicas(x, group, Adjoint::Replicated);
}

Variable all_reduce_cross_replica_sum(const Variable& x, const Group& group,
                                      bool insert_in_grad_graph) {
  detail::check_differentiable_input(x, group, "all_reduce_cross_replica_sum");
  // PopART's grad op of ReplicatedAllReduceTP is the same op with `backwards` negated, and the
  // instance marked `backwards` becomes an identity: whichever pass does not reduce is the
  // identity. replicate() is exactly the forward-identity / backward-sum half.
  if (insert_in_grad_graph) return ferry::replicate(x, group);
  return ferry::all_reduce(x, group, ReduceOp::Sum, Adjoint::Replicated);
}

Variable all_to_all_single_cross_replica(const Variable& x, const Group& group) {
  constexpr const char* kOp = "all_to_all_single_cross_replica";
  detail::check_differentiable_input(x, group, kOp);
  FERRY_CHECK(x.dim() >= 1, InvalidArgument, detail::where(kOp, group),
              ": the input needs a leading axis to cut into ", group.size(),
              " chunks (one per replica), given a 0-d tensor");
  FERRY_CHECK(x.size(0) % group.size() == 0, InvalidArgument, detail::where(kOp, group),
              ": the leading axis (size ", x.size(0), ", shape ", shape_str(x.shape()),
              ") must be divisible by the number of replicas R = ", group.size(),
              " (uneven chunks are not supported)");
  return ferry::all_to_all_single(x, group);
}

}  // namespace ferry::poptorch
