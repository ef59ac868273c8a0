// Argument validation of the raw collectives, on the calling rank, before anything is queued
// or any byte moves (internal).
#pragma once

#include <ferry/collectives/group.h>
#include <ferry/runtime/reduce_op.h>
#include <ferry/runtime/tensor.h>

#include <string>
#include <vector>

namespace ferry::detail {

// InvalidArgument "<op>: called on a null Group (...)" unless `group` is valid: a null group has
// no rank to name. The one check of a group argument, for the raw collectives (the Validator's
// constructor) and for the layers above them (the differentiable collectives, torchrec's ops).
void check_group(const Group& group, const char* op);

// Checks the arguments of one call on the calling rank; every failure throws InvalidArgument
// "<op> on rank R of group G (size W): <what was expected>, given <what was given>". The
// differentiable collectives and torchrec's comm ops phrase their checks through it too, so an
// error reads the same at every layer.
class Validator {
 public:
  // check_group first.
  Validator(const char* op, const Group& group);

  [[noreturn]] void fail(const std::string& what) const;
  void defined(const Tensor& t, const char* name) const;
  void same_dtype(const Tensor& t, const char* name, DType expected,
                  const char* expected_from) const;
  void shape_is(const Tensor& t, const char* name, const Shape& expected) const;
  // shape_is(t, name, with_rows(like, rows)) without building the shape (an allocation).
  void shape_with_rows_is(const Tensor& t, const char* name, const Shape& like,
                          int64_t rows) const;
  void at_least_1d(const Tensor& t, const char* name) const;
  // The same for any value's shape; `why` (may be null) says what the dimension is for.
  void at_least_1d(const Shape& shape, const char* name, const char* why) const;
  // `name` has at least one dimension and its rows (dim 0) are a multiple of the group size:
  // ops that cut them into one block per rank.
  void rows_divisible(const Shape& shape, const char* name) const;
  // `dtype` is float32 or float64 (no half types); `who` names what takes only those.
  void float32_or_64(DType dtype, const char* name, const char* who) const;
  void root(int root) const;
  // One non-negative entry per rank; returns their sum.
  int64_t sizes(const std::vector<int64_t>& sizes, const char* name) const;
  // The byte ranges must not overlap, except when `b` is exactly `exact_ok` (when defined).
  void no_overlap(const Tensor& a, const char* an, const Tensor& b, const char* bn,
                  const Tensor& exact_ok = Tensor()) const;
  // The same, with the allowed range given as `exact_bytes` bytes at `exact_ok`.
  void no_overlap(const Tensor& a, const char* an, const Tensor& b, const char* bn,
                  const void* exact_ok, size_t exact_bytes) const;
  void reduce_op(ReduceOp op, DType dtype) const;
  // The same dtype for every tensor of a list, and exactly W tensors.
  void tensor_list(const std::vector<Tensor>& list, const char* name, DType dtype) const;

  const Group& group() const { return group_; }

 private:
  std::string prefix() const;
  const char* op_;
  const Group& group_;
};

}  // namespace ferry::detail
