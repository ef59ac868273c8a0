// The collective engine (internal): argument validation with uniform messages, and issuing an
// op onto its group's worker.
#pragma once

#include "collectives/collectives.h"
#include "collectives/group_impl.h"
#include "collectives/op_context.h"

#include <functional>
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
  void same_dtype(const Tensor& t, const char* name, DType expected, const char* expected_from) const;
  void shape_is(const Tensor& t, const char* name, const Shape& expected) const;
  void at_least_1d(const Tensor& t, const char* name) const;
  void root(int root) const;
  // One non-negative entry per rank; returns their sum.
  int64_t sizes(const std::vector<int64_t>& sizes, const char* name) const;
  // The byte ranges must not overlap, except when `b` is exactly `exact_ok` (when defined).
  void no_overlap(const Tensor& a, const char* an, const Tensor& b, const char* bn,
                  const Tensor& exact_ok = Tensor()) const;
  void reduce_op(ReduceOp op, DType dtype) const;
  // The same dtype for every tensor of a list, and exactly W tensors.
  void tensor_list(const std::vector<Tensor>& list, const char* name, DType dtype) const;

  const Group& group() const { return group_; }

 private:
  std::string prefix() const;
  const char* op_;
  const Group& group_;
};

// The op's body runs on the group's worker; what it returns becomes Work::outputs().
using OpBody = std::function<std::vector<Tensor>(OpContext&)>;

// What a Work's on_wait_timeout does for a collective: poison the group.
std::function<void(const std::string&)> poison_on_wait_timeout(const Group& group);

// Takes the next sequence number of the group and queues `body`. Throws at once if the group is
// poisoned. Any error from the body fails the Work and poisons the group (the ranks can no
// longer be assumed to be in step).
Work submit(const Group& group, const std::string& op, const std::string& what, OpBody body);

// Shape with dim 0 replaced: [rows, shape[1:]...].
Shape with_rows(const Shape& shape, int64_t rows);
// Bytes of one row along dim 0 (the whole tensor for 0-d).
size_t row_bytes(const Tensor& t);

}  // namespace ferry::detail
