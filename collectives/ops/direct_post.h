// Collectives over point-to-point posted when they are issued (internal): the small
// all_reduce's direct exchange and the pairwise all-to-all.
//
// On transports without their own collectives (UCX, local), an op queued on its group's
// executor is run by a thread that waits for it: the queue, the task and the hand-off cost more
// than an 8 B all_reduce itself (about 6,000 instructions per op against MPICH's 1 us). The
// direct exchange (algorithms/direct_all_reduce.cpp) posts all of its sends and receives in one
// go, so it is the all_reduce's one-round post (engine/issue.h): when the group's executor has
// nothing queued or running, the issuing thread posts them at once and the Work finishes the op
// when waited on or tested, combining the payloads. The data moves while the caller does other
// work, and nothing is handed between threads.
//
// Every rank still runs the same algorithm (the algorithm table picks it from what all ranks
// agree on: size, group size, override), so the messages match whichever path each rank takes.
//
// It lives with the ops because the engine comes before the algorithms (which run over its
// OpContext) and must not use them.
#pragma once

#include <ferry/collectives/engine/in_flight_work.h>
#include <ferry/collectives/engine/op_context.h>

#include <memory>

namespace ferry::detail {

// Posts all_reduce(input -> output) over `ctx` for an op the table gave the direct exchange,
// whose dtype needs no widening (not Avg, not 16-bit floats); returns what is then in flight.
std::unique_ptr<InFlight> post_direct_all_reduce_now(std::unique_ptr<OpContext> ctx,
                                                     const Tensor& input, Tensor& output,
                                                     ReduceOp op);

// What is in flight once an exchange that needs nothing after its transfers (the pairwise
// all-to-all) has posted every message over `ctx`: finished when they are.
std::unique_ptr<InFlight> posted_exchange(std::unique_ptr<OpContext> ctx);

}  // namespace ferry::detail
