// The raw collectives: on Tensors, each returning a Work (implemented in collectives/ops/). The
// same ops on Variables, recorded on the autograd tape, are collectives/differentiable/
// differentiable.h, built on these.
//
// Every call is asynchronous: it validates its arguments on the calling rank, throwing
// InvalidArgument before any data moves, then returns a Work while the data moves in the
// background. The caller keeps ownership of the tensors; the op holds handles to them until it
// completes, and the caller must not touch their contents until Work::wait() returns.
//
// Every member of the group must issue the same collectives in the same order with matching
// arguments (same dtype, same reduce op, same root, consistent sizes). A mismatch that can only
// be seen across ranks fails with MismatchError; a missing rank with TimeoutError at the
// deadline, naming the ranks that never reached the collective. Sizes ("splits") are counts of
// rows along dim 0.
//
// A call rejected with InvalidArgument takes no sequence number and leaves the group usable;
// but the other ranks, which did issue the collective, then wait for this rank until their
// deadline. Arguments only the root holds (reduce's output, gather's and scatter's lists) are
// checked on the root only. Any other failure (timeout, peer failure, mismatch) poisons the
// group on the rank that saw it, and that rank gives up on the group so the peers waiting on
// it fail at once with PeerFailure rather than at their deadline.
//
// Every dtype works. float16 and bfloat16 reductions accumulate in float32 and round once at the
// end. Integer sums wrap around. Avg is only defined for floating dtypes.
#pragma once

#include <ferry/collectives/group.h>
#include <ferry/runtime/reduce_op.h>
#include <ferry/runtime/tensor.h>
#include <ferry/runtime/work.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace ferry {

// ---- reductions ----
// In place: every rank ends with the reduction of all ranks' `tensor`.
Work all_reduce(Tensor tensor, const Group& group, ReduceOp op = ReduceOp::Sum);
// Out of place: `output` (same dtype and shape as input, not overlapping it unless it is the
// very same tensor) receives the reduction; `input` is left unchanged.
Work all_reduce(const Tensor& input, Tensor output, const Group& group,
                ReduceOp op = ReduceOp::Sum);
// The reduction arrives on `root` only, in `output` (same dtype and shape as input). On other
// ranks `output` may be undefined and is not touched.
Work reduce(const Tensor& input, Tensor output, int root, const Group& group,
            ReduceOp op = ReduceOp::Sum);
// input: [W*m, ...]; output: [m, ...]. Rank r receives the reduction of every rank's block r.
// output may be exactly rank r's block of input (a view); any other overlap is rejected.
Work reduce_scatter(const Tensor& input, Tensor output, const Group& group,
                    ReduceOp op = ReduceOp::Sum);
// torch.distributed's list form: inputs[k] (rows of one shape) is this rank's contribution to
// rank k; output is shaped like inputs[rank]. The ring and the shared-memory path read the
// inputs where they lie (no copy into one buffer, except for MPI's own collective, whose call
// takes one).
Work reduce_scatter(const std::vector<Tensor>& inputs, Tensor output, const Group& group,
                    ReduceOp op = ReduceOp::Sum);
// torch.distributed's name and argument order (output first) for code ported from torch: the
// same op as reduce_scatter(input, output, group, op).
inline Work reduce_scatter_tensor(Tensor output, const Tensor& input, const Group& group,
                                  ReduceOp op = ReduceOp::Sum) {
  return reduce_scatter(input, std::move(output), group, op);
}
// input: [sum(sizes), ...]; output: [sizes[rank], ...]. sizes: one row count per rank, the same
// on every rank.
Work reduce_scatter_v(const Tensor& input, Tensor output, const std::vector<int64_t>& sizes,
                      const Group& group, ReduceOp op = ReduceOp::Sum);

// ---- data movement ----
// `tensor` on root is sent to every rank's `tensor` (same dtype and shape everywhere).
Work broadcast(Tensor tensor, int root, const Group& group);
// input: [m, ...] on every rank (same m); output: [W*m, ...], rank k's input in block k.
// input may be exactly the caller's block of output; any other overlap is rejected.
Work all_gather(const Tensor& input, Tensor output, const Group& group);
// torch.distributed's name and argument order (output first) for code ported from torch: the
// same op as all_gather(input, output, group).
inline Work all_gather_into_tensor(Tensor output, const Tensor& input, const Group& group) {
  return all_gather(input, std::move(output), group);
}
// Uneven: rank k contributes sizes[k] rows; output: [sum(sizes), ...] in rank order.
Work all_gather_v(const Tensor& input, Tensor output, const std::vector<int64_t>& sizes,
                  const Group& group);
// Uneven with the sizes exchanged first; the output is allocated by the op:
// work.output(0) is the gathered tensor, work.output(1) the int64 sizes per rank.
Work all_gather_v(const Tensor& input, const Group& group);
// Equal: input and output have the same shape [W*m, ...]; block j of input goes to rank j and
// block k of output comes from rank k. Output must not overlap input (both forms).
Work all_to_all_single(const Tensor& input, Tensor output, const Group& group);
// Uneven (torch.distributed order): input_split_sizes[j] rows go to rank j, output_split_sizes[k]
// rows come from rank k. Each rank's output_split_sizes[k] must equal rank k's
// input_split_sizes[me]. Empty lists mean equal blocks; either every rank passes lists or none
// does (the MPI transport carries the two forms by different MPI calls, which do not match).
Work all_to_all_single(const Tensor& input, Tensor output,
                       const std::vector<int64_t>& output_split_sizes,
                       const std::vector<int64_t>& input_split_sizes, const Group& group);
// A block's place in a tensor's flat storage when it is not one run of rows: runs read (or
// written) in order, each `count` pieces of `length` elements, piece j starting at element
// `offset + j * stride` (MPI's vector datatype). Columns c..c+d of a [b, n] matrix are
// {{c, b, d, n}}; a list of segments is one run per segment with count 1.
struct StridedRun {
  int64_t offset = 0;
  int64_t count = 1;
  int64_t length = 0;
  int64_t stride = 0;
};
using BlockLayout = std::vector<StridedRun>;
// all_to_all_single with a layout per block: block j of what this rank sends is read from
// `input` through send_layouts[j], and the block from rank k is written into `output` through
// recv_layouts[k] (elements of the tensors' dtype). Rank j's send_layouts[k] and rank k's
// recv_layouts[j] hold the same number of elements (MismatchError otherwise). Received blocks
// must not overlap each other (not checked). Every rank of the call uses this form. The local
// transport copies straight between the layouts, so the bytes move once, as in the contiguous
// forms; MPI and UCX send a block that is one contiguous span as it is and pack the others into
// a staging buffer (and unpack them out of one).
Work all_to_all_single(const Tensor& input, const std::vector<BlockLayout>& send_layouts,
                       Tensor output, const std::vector<BlockLayout>& recv_layouts,
                       const Group& group);
// Several laid-out all-to-alls, of any dtypes, as ONE collective (one sequence number, one
// Work, one wait; NCCL would group them): part p moves parts[p].input through its send layouts
// into parts[p].output through its receive layouts, each part checked as the single form checks
// it. Every rank gives the same number of parts; part p of rank j's send_layouts[k] and of rank
// k's recv_layouts[j] hold the same number of bytes. A KJT's lengths, values and weights move
// this way.
struct LayoutAllToAllPart {
  Tensor input;
  std::vector<BlockLayout> send_layouts;
  Tensor output;
  std::vector<BlockLayout> recv_layouts;
};
Work all_to_all_single(const std::vector<LayoutAllToAllPart>& parts, const Group& group);
// Lists of W tensors: inputs[j] goes to rank j, outputs[k] comes from rank k. Every tensor of
// both lists has one dtype; shapes may differ but bytes must match pairwise across ranks.
Work all_to_all(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                const Group& group);
// On root, outputs holds W tensors of input's dtype (outputs[k] receives rank k's input: the
// byte counts must match, shapes may differ); elsewhere it is ignored and may be empty.
Work gather(const Tensor& input, const std::vector<Tensor>& outputs, int root,
            const Group& group);
// On root, inputs holds W tensors (inputs[k] goes to rank k's output); elsewhere ignored.
Work scatter(const std::vector<Tensor>& inputs, Tensor output, int root, const Group& group);
Work barrier(const Group& group);

// ---- point to point ----
// Match by (peer, tag) in posting order; they do not advance the group's sequence number.
Work send(const Tensor& tensor, int dst, const Group& group, int tag = 0);
Work recv(Tensor tensor, int src, const Group& group, int tag = 0);

}  // namespace ferry
