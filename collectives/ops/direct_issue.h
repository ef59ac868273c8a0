// Small all_reduce over point-to-point started when it is issued (internal).
//
// On transports without their own collectives (UCX, local), an op is normally queued on its
// group's executor and run by a thread that waits for it: the queue, the task and the hand-off
// cost more than an 8 B all_reduce itself (about 6,000 instructions per op against MPICH's
// 1 us). The direct exchange (algorithms/direct_all_reduce.cpp) posts all of its sends and
// receives in one go, so when the group's executor has nothing queued or running, the issuing
// thread posts them at once and the Work finishes the op when waited on or tested: the data
// moves while the caller does other work, and nothing is handed between threads.
//
// Every rank still runs the same algorithm (the algorithm table picks it from what all ranks
// agree on: size, group size, override), so the messages match whichever path each rank takes.
//
// It is an issue path of the engine for one op and one algorithm; it lives with the ops because
// the engine comes before the algorithms (which run over its OpContext) and must not use them.
#pragma once

#include <ferry/collectives/engine/engine.h>

#include <optional>

namespace ferry::detail {

// Starts all_reduce(input -> output) now, for an op the table gave the direct exchange, if it
// can start at issue and the dtype needs no widening (not Avg, not 16-bit floats);
// std::nullopt tells the caller to submit() it instead.
std::optional<Work> start_direct_all_reduce_now(const Group& group, const Tensor& input,
                                                Tensor& output, ReduceOp op);

}  // namespace ferry::detail
