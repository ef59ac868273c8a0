#include <ferry/collectives/ksuit/ksuit.h>

#include <ferry/autograd/ops.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/differentiable/differentiable.h>
#include <ferry/collectives/differentiable/checks.h>
#include <ferry/collectives/engine/validator.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <cstring>

namespace ferry::ksuit {

namespace {

// The nograd forms move values only, so any dtype will do (ksuit gathers labels and indices).
void check_values_input(const Variable& x, const Group& group, const char* op) {
  detail::check_group(group, op);
  FERRY_CHECK(x.defined(), InvalidArgument, detail::where(op, group),
              ": the input is an undefined variable");
}

Shape prepend_one(const Shape& shape) {
  Shape row{1};
  row.insert(row.end(), shape.begin(), shape.end());
  return row;
}

// ksuit's 0-d inputs become one row: W of them gather into a [W] vector.
Tensor as_rows(const Tensor& v) { return v.dim() == 0 ? v.reshape({1}) : v; }

// [n, ...] on every rank -> [W*n, ...] in rank order.
Tensor gather_rows(const Tensor& v, const Group& group) {
  Tensor y = empty(with_rows(v.shape(), v.size(0) * group.size()), v.dtype());
  ferry::all_gather(v, y, group).wait();
  return y;
}

// dim in [-rank, rank) made non-negative, or InvalidArgument naming op and rank.
int64_t normalize_batch_dim(int64_t dim, const Shape& shape, const Group& group,
                            const char* op) {
  const auto rank = static_cast<int64_t>(shape.size());
  FERRY_CHECK(dim >= -rank && dim < rank, InvalidArgument, detail::where(op, group),
              ": batch_dim ", dim, " is out of range for the input's shape ", shape_str(shape),
              " (expected [", -rank, ", ", rank - 1, "])");
  return dim < 0 ? dim + rank : dim;
}

}  // namespace

Variable all_gather_grad(const Variable& x, const Group& group, int64_t batch_dim) {
  constexpr const char* kOp = "ksuit::all_gather_grad";
  detail::check_differentiable_input(x, group, kOp);
  // ksuit unsqueezes 0-d slots to [1] before concatenating, so W scalars give a [W] vector.
  const Variable rows = x.dim() == 0 ? reshape(x, {1}) : x;
  const int64_t dim = normalize_batch_dim(batch_dim, rows.shape(), group, kOp);
  // Along dim 0 the gathered rows already are the concatenation (and the P all_gather's
  // backward is the reduce_scatter ksuit computes as all_reduce + select).
  if (dim == 0) return ferry::all_gather(rows, group, Adjoint::PerRank);
  // Along another dim: gather the W slots along a new leading axis, then concatenate them
  // along batch_dim. Every step is differentiable, so the backward is the P all_gather's
  // reduce_scatter of the slot gradients that cat's and split's backwards put together.
  const Variable stacked =
      ferry::all_gather(reshape(rows, prepend_one(rows.shape())), group, Adjoint::PerRank);
  std::vector<Variable> slots = split(stacked, 1, 0);
  for (Variable& slot : slots) slot = reshape(slot, rows.shape());
  return cat(slots, dim);
}

Variable all_gather_grad_autograd(const Variable& x, const Group& group) {
  return all_gather_grad(x, group, 0);
}

Variable all_gather_grad_overwrite(const Variable& x, const Group& group) {
  detail::check_differentiable_input(x, group, "ksuit::all_gather_grad_overwrite");
  // ksuit's local slot is x itself and the others are plain values, so after the concatenation
  // the gradient of x is its own rows of this rank's G: the R all_gather's backward.
  return ferry::all_gather(x.dim() == 0 ? reshape(x, {1}) : x, group, Adjoint::Replicated);
}

Variable all_gather_nograd(const Variable& x, const Group& group) {
  check_values_input(x, group, "ksuit::all_gather_nograd");
  return Variable(gather_rows(as_rows(x.value()), group));
}

Variable all_gather_nograd_clipped(const Variable& x, const Group& group, int64_t max_length) {
  constexpr const char* kOp = "ksuit::all_gather_nograd_clipped";
  check_values_input(x, group, kOp);
  FERRY_CHECK(max_length >= 0, InvalidArgument, detail::where(kOp, group),
              ": max_length must be >= 0, given ", max_length);
  const Tensor v = as_rows(x.value());
  const int world = group.size();
  const int64_t rows = v.size(0);  // L: every rank's share of the sampler's indices
  const Tensor gathered = gather_rows(v, group);
  // A distributed sampler deals sample i to rank i % W as its (i / W)-th row, so sample
  // l*W + w is rank w's row l: (W, L, ...) -> (L, W, ...).
  Tensor ordered = empty(gathered.shape(), gathered.dtype());
  const size_t row_bytes = ferry::row_bytes(v);
  const auto* src = static_cast<const unsigned char*>(gathered.raw_data());
  auto* dst = static_cast<unsigned char*>(ordered.raw_data());
  for (int64_t l = 0; l < rows; ++l) {
    for (int w = 0; w < world; ++w) {
      std::memcpy(dst + static_cast<size_t>(l * world + w) * row_bytes,
                  src + static_cast<size_t>(w * rows + l) * row_bytes, row_bytes);
    }
  }
  // What is left past max_length is the sampler's padding (repeated samples).
  return Variable(ordered.narrow(0, 0, std::min(max_length, rows * world)));
}

Variable all_reduce_sum_grad(const Variable& x, const Group& group) {
  detail::check_differentiable_input(x, group, "ksuit::all_reduce_sum_grad");
  return ferry::all_reduce(x, group, ReduceOp::Sum, Adjoint::Replicated);
}

Variable all_reduce_mean_grad(const Variable& x, const Group& group) {
  detail::check_differentiable_input(x, group, "ksuit::all_reduce_mean_grad");
  // ksuit divides the sum by W; Avg sums then divides too, and its R backward is G / W.
  return ferry::all_reduce(x, group, ReduceOp::Avg, Adjoint::Replicated);
}

Variable all_reduce_sum_nograd(const Variable& x, const Group& group) {
  check_values_input(x, group, "ksuit::all_reduce_sum_nograd");
  Tensor y = empty(x.shape(), x.dtype());
  ferry::all_reduce(x.value(), y, group, ReduceOp::Sum).wait();
  return Variable(y);
}

Variable all_reduce_mean_nograd(const Variable& x, const Group& group) {
  check_values_input(x, group, "ksuit::all_reduce_mean_nograd");
  Tensor y = empty(x.shape(), x.dtype());
  ferry::all_reduce(x.value(), y, group, ReduceOp::Avg).wait();
  return Variable(y);
}

}  // namespace ferry::ksuit
