// Serial references of the differentiable collectives (collectives/differentiable), forward and
// adjoint, for the seeded random cases (test_random_differentiable.cpp).
//
// Every rank's tensor is held as its shape and its values in row-major order, as doubles; a
// "row" is everything after dim 0. The references take every rank's inputs (and output
// gradients) at once and return every rank's outputs (input gradients), written from the
// contracts of differentiable.h with no code shared with the library.
#pragma once

#include <ferry/collectives/differentiable/differentiable.h>
#include <ferry/runtime/dtype.h>
#include <ferry/runtime/reduce_op.h>
#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace rdtest {

enum class Kind {
  AllReduce,
  Replicate,
  AllGather,
  AllGatherV,
  ReduceScatter,
  ReduceScatterV,
  AllToAll,        // equal splits
  AllToAllSplit,   // torch.distributed's split lists
  AllToAllAsync,   // the Req/Wait form of the split lists (req_wait.h)
  Broadcast,
  Scatter,
  Gather,
};
const char* kind_name(Kind k);

struct Case {
  Kind kind = Kind::AllReduce;
  int world = 1;
  ferry::DType dtype = ferry::DType::Float32;
  ferry::ReduceOp op = ferry::ReduceOp::Sum;         // AllReduce
  ferry::Adjoint adjoint = ferry::Adjoint::PerRank;  // the ops with a replicated output
  int root = 0;                                      // Broadcast, Scatter, Gather
  int64_t m = 0;                                     // rows of one block
  ferry::Shape trailing;                             // the dims after the rows
  bool scalar = false;  // a 0-d input (AllReduce, Replicate, Broadcast)
  std::vector<int64_t> rows;                 // AllGatherV: rank k's rows; ReduceScatterV: sizes
  std::vector<std::vector<int64_t>> splits;  // AllToAllSplit/Async: rows rank k sends to rank j

  std::string describe() const;
};

struct Values {
  ferry::Shape shape;
  std::vector<double> v;  // row-major, shape_numel(shape) of them
};

ferry::Shape input_shape(const Case& c, int rank);
ferry::Shape output_shape(const Case& c, int rank);

// Every rank's output from every rank's input.
std::vector<Values> reference_forward(const Case& c, const std::vector<Values>& x);
// Every rank's input gradient from every rank's input and output gradient, under the case's
// adjoint convention; a rank that gets no gradient (broadcast's and scatter's non-roots) gets
// zeros.
std::vector<Values> reference_backward(const Case& c, const std::vector<Values>& x,
                                       const std::vector<Values>& g);

}  // namespace rdtest
