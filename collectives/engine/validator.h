// Argument validation of the raw collectives, on the calling rank, before anything is queued
// or any byte moves (internal).
#pragma once

#include <ferry/collectives/group.h>
#include <ferry/runtime/reduce_op.h>
#include <ferry/runtime/tensor.h>

#include <string>
#include <vector>

namespace ferry::detail {

// Checks the arguments of one call on the calling rank; every failure throws InvalidArgument
// "<op> on rank R of group G (size W): <what was expected>, given <what was given>".
class Validator {
 public:
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
