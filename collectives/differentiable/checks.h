// Checks shared by every differentiable collective (differentiable.h) and by the differentiable
// ops of the seed families built on them. Installed with the public headers, so that a family,
// which includes nothing but public headers, raises the same errors; not part of ferry.h.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/group.h>

#include <cstdint>
#include <vector>

namespace ferry::detail {

// Every check here speaks as the raw collectives' Validator does: InvalidArgument "<op> on rank
// R of group G (size W): <what was expected>, given <what was given>", raised before any data
// moves.

// InvalidArgument "<op>: called on a null Group (...)" unless `group` is valid (the raw
// collectives' own check, declared here for the layers that include only public headers).
void check_group(const Group& group, const char* op);

// The group is valid and `x` is a defined float32 / float64 variable.
void check_differentiable_input(const Variable& x, const Group& group, const char* op);

// `x` has at least one dimension (ops that cut or gather rows along dim 0).
void check_has_rows(const Variable& x, const Group& group, const char* op);

// `x`'s rows are a multiple of the group size (ops that cut them into one block per rank).
void check_rows_divisible(const Variable& x, const Group& group, const char* op);

// `sizes` (split sizes, batch sizes, ... named `name`) has one entry per rank, each >= 0.
void check_per_rank(const std::vector<int64_t>& sizes, const char* name, const Group& group,
                    const char* op);

// A fingerprint of every dim of `shape` but `skip_dim` (and of the number of dims), so that
// ranks can check with one int64 each that they agree on the dims a gather does not
// concatenate. skip_dim = -1 covers every dim.
int64_t shape_fingerprint(const Shape& shape, int64_t skip_dim);

}  // namespace ferry::detail
