// The collective engine (internal): argument validation with uniform messages, and issuing an
// op onto its group's worker.
#pragma once

#include "collectives/collectives.h"
#include "collectives/group_impl.h"
#include "collectives/op_context.h"

#include <array>
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

// The op's body runs on the group's worker; what it returns becomes Work::outputs().
using OpBody = std::function<std::vector<Tensor>(OpContext&)>;

// What an op was called with, for its description in messages: "(sum, float32 [4, 2]) root 0".
// Kept as values and formatted only when a message needs it.
struct OpSummary {
  bool has_tensor = false;
  bool lists = false;
  DType dtype = DType::Float32;
  // The shape, inline: a Shape (a vector) would cost an allocation per op. Dims past kDims are
  // shown as "...".
  static constexpr int kDims = 6;
  std::array<int64_t, kDims> dims{};
  int ndim = 0;
  bool has_reduce_op = false;
  ReduceOp reduce_op = ReduceOp::Sum;
  int root = -1;
  const char* note = "";  // appended as is, e.g. " with exchanged sizes"

  static OpSummary of(const Tensor& t);
  static OpSummary of(const Tensor& t, ReduceOp op);
  static OpSummary of_lists(DType dtype);  // "(float32 lists)"
  OpSummary& with_root(int r) { root = r; return *this; }
  OpSummary& with_note(const char* n) { note = n; return *this; }
  std::string format() const;
};

// What a Work's on_wait_timeout does for a collective: poison the group.
std::function<void(const std::string&)> poison_on_wait_timeout(const Group& group);
void poison_after_wait_timeout(GroupImpl& group, const std::string& why);

// Takes the next sequence number of the group and queues `body`. Throws at once if the group is
// poisoned. Any error from the body fails the Work and poisons the group (the ranks can no
// longer be assumed to be in step).
Work submit(const Group& group, const char* op, OpSummary what, OpBody body);

// What names a collective's Work, "all_reduce (sum, float32 [4]) (seq 5) on group ...", kept as
// values and put together only when asked for (see WorkState).
struct OpDescription {
  OpDescription(const char* op, uint64_t seq, OpSummary what, const Group& group);
  std::string format() const;

  const char* op;
  uint64_t seq;
  OpSummary what;
  std::weak_ptr<GroupImpl> group;  // weak: a Work may outlive its group
  uint32_t group_id;
};

// The same as a WorkState describer.
std::function<std::string()> describe_op(const char* op, uint64_t seq, OpSummary what,
                                         const Group& group);

// Shape with dim 0 replaced: [rows, shape[1:]...].
Shape with_rows(const Shape& shape, int64_t rows);
// Bytes of one row along dim 0 (the whole tensor for 0-d).
size_t row_bytes(const Tensor& t);

}  // namespace ferry::detail
