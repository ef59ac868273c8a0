// What names a collective in messages and traces (internal): the op, what it was called with,
// its sequence number and its group, kept as values and formatted only when a message needs it
// (building the string for every op would cost more than a small collective).
#pragma once

#include <ferry/collectives/group.h>
#include <ferry/runtime/reduce_op.h>
#include <ferry/runtime/tensor.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ferry::detail {

// What an op was called with, for its description in messages: "(sum, float32 [4, 2]) root 0".
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
  // What every rank must give alike, for the fingerprint (fingerprint.h): `agreed` elements
  // (the tensor's, or per row when `per_row`; -1: not compared, the sizes may differ across
  // ranks) and split sizes whose hash is `splits` (0: none).
  int64_t agreed = -1;
  bool per_row = false;
  uint64_t splits = 0;

  static OpSummary of(const Tensor& t);
  static OpSummary of(const Tensor& t, ReduceOp op);
  static OpSummary of_lists(DType dtype);  // "(float32 lists)"
  OpSummary& with_root(int r) { root = r; return *this; }
  OpSummary& with_note(const char* n) { note = n; return *this; }
  // The sizes may differ across ranks, but not the elements per row.
  OpSummary& rows_may_differ(int64_t elements_per_row) {
    agreed = elements_per_row;
    per_row = true;
    return *this;
  }
  // Nothing about the sizes is compared (gather, scatter, all_to_all: per-peer sizes).
  OpSummary& sizes_may_differ() { agreed = -1; return *this; }
  OpSummary& with_splits(const std::vector<int64_t>& sizes);
  // The same as with_splits of `blocks` sizes equal to `size`, without building the list.
  OpSummary& with_equal_splits(int blocks, int64_t size);
  std::string format() const;
};

// What names a collective's Work, "all_reduce (sum, float32 [4]) (seq 5) on group ...", put
// together only when asked for (see WorkState).
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

}  // namespace ferry::detail
