// The differentiable all_to_all_single split into launch and wait (req_wait.h).
//
//   AsyncRequest<Variable> req = ferry::all_to_all_single_async(x, group);
//   Variable h = mlp(other);             // runs while x's rows move
//   Variable y = req.wait();             // the rows of every rank
//
// The same op as the blocking ferry::all_to_all_single (differentiable.h), hence the same
// values and gradients bit for bit: forward sends block j of x to rank j; backward is the
// all_to_all of the output gradients with the splits swapped (the P adjoint: each rank's loss
// counts). What differs is when the data moves: the forward collective is launched here and
// completed by wait(); in backward the gradient collective is launched by the Wait node and
// completed by the Req node, so the nodes recorded between launch and wait run while it is in
// flight. The blocking form runs the same steps inside one node.
//
// Arguments as for the blocking op: x is float32 or float64 with at least one dimension.
// Equal form: x's rows a multiple of W, y of x's shape. Split form (torch.distributed order):
// input_split_sizes[j] rows of x go to rank j, output_split_sizes[k] rows of y come from rank
// k; one entry per rank each, each rank's output_split_sizes[k] equal to rank k's
// input_split_sizes[me]. Bad arguments throw InvalidArgument on the calling rank before any data
// moves and record nothing; a mismatch only visible across ranks fails the wait (MismatchError).
// Every rank of the group launches its requests in the same order (req_wait.h has the rest of
// the contract: one wait per request, dropped requests, errors). At W = 1 the request still
// records its two nodes (y is a copy of x), as the blocking op does.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/differentiable/req_wait.h>
#include <ferry/collectives/group.h>

#include <cstdint>
#include <vector>

namespace ferry {

AsyncRequest<Variable> all_to_all_single_async(const Variable& x, const Group& group);

AsyncRequest<Variable> all_to_all_single_async(const Variable& x,
                                               const std::vector<int64_t>& output_split_sizes,
                                               const std::vector<int64_t>& input_split_sizes,
                                               const Group& group);

}  // namespace ferry
