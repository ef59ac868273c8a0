// The shared-memory path of the raw collectives, as ops/ uses it (internal).
//
// Each op has two forms, like the other paths: started at issue (the op's `post`, engine/
// issue.h), which publishes this rank's part on the issuing thread and returns what is in
// flight, so a small all_reduce pays no hand-off to the group's worker; and run to completion
// on an OpContext (the op's queued body: behind a queued op, under FERRY_CHECK=1, or on buffers
// widened for a 16-bit sum). Both record Algorithm::SharedMemory as what ran.
#pragma once

#include <ferry/collectives/engine/in_flight_work.h>
#include <ferry/collectives/engine/op_context.h>
#include <ferry/collectives/shm/all_to_all_blocks.h>
#include <ferry/collectives/shm/gather_blocks.h>
#include <ferry/collectives/shm/shm_layout.h>

#include <memory>
#include <span>

namespace ferry::detail::shm {

// Makes `g`'s shared segment now when its ranks share a host (GroupImpl::one_host) and are more
// than one: collective, as making the group is (Group::world and Group::split call it). Made
// with the group rather than by its first op, so that no op ever waits at issue for a peer to
// take part in an exchange: a rank that skips the group's first collective then makes its
// peers time out in that op's wait, with the engine's diagnosis, as on the other paths. Throws
// as SharedSegment::map_for_group does.
void prepare_group(GroupImpl& g);

// An uninitialised tensor that the peers of `g` will read or write in its collectives: in the
// process's shared arena where the group's ranks share a host and it is above the slots, so
// that the path reaches it by mapping instead of through the kernel (and a gather's peers
// write their blocks straight into it); ordinary memory otherwise, and where the arena cannot
// grow (said in the log at level info). `why`: what it is, for that line.
Tensor empty_for_peers(Shape shape, DType dtype, const GroupImpl& g, const char* why);

// all_reduce of any size: up to kSlotBytes through the segment's slots, above by single copy
// from the peers' buffers (shm_all_reduce_large.cpp), or slot by slot where the ranks cannot
// read each other's memory. Avg runs as a sum whose output is divided once the op is done.
std::unique_ptr<InFlight> post_all_reduce(std::unique_ptr<OpContext> ctx, const Tensor& input,
                                          Tensor& output, ReduceOp op);
void all_reduce(OpContext& ctx, const void* in, void* out, size_t count, DType dtype,
                ReduceOp op);
// A float16 or bfloat16 all_reduce above kSlotBytes (its own bytes) by single copy, run to its
// end: each rank widens every rank's piece of its slice to float32 a chunk at a time in the
// cache, sums there in rank order, divides for Avg, and rounds once into `out`; the peers copy
// the finished 16-bit slices. The bits of widening the whole tensors first (as the engine
// does for every other path) with half the bytes between the ranks and no pass over float32
// copies. False, having done nothing, where it does not apply (smaller, or the ranks cannot
// read each other's memory: the same answer on every rank).
bool all_reduce_widened(OpContext& ctx, const void* in, void* out, size_t count, DType dtype,
                        ReduceOp op);

std::unique_ptr<InFlight> post_barrier(std::unique_ptr<OpContext> ctx);
void barrier(OpContext& ctx);

// An all-to-all by single copy, every part's blocks (equal, split or laid out): each rank reads
// its blocks out of its peers' tensors into its own. Null when the ranks cannot read each
// other's memory, or the blocks are too many for the segment's slot (every rank gets the same
// answer): `blocks` is not taken then, and the caller takes the pairwise exchange, over the same
// context, and records that. Started, the op owns `blocks` until it completed. `name`: the
// collective its messages name (null: all_to_all_single). Peers write their blocks into this
// rank's receive blocks that lie in shared memory, unless `let_peers_write` is false: an op
// whose Work cannot keep its outputs for the life of the process should it fail (the list
// form's, whose outputs `blocks` holds) then reads every block it receives itself.
std::unique_ptr<InFlight> post_all_to_all(std::unique_ptr<OpContext>& ctx,
                                          std::unique_ptr<AllToAllBlocks>& blocks,
                                          const char* name = nullptr,
                                          bool let_peers_write = true);
// Run to completion, every block this rank receives read by it; false (nothing done) where
// post_all_to_all would return null.
bool all_to_all(OpContext& ctx, const AllToAllBlocks& blocks, const char* name = nullptr);

// A gather (all_gather, all_gather_v, broadcast: `c`, as recorded): blocks of up to a slot go
// through the segment's slots, larger ones by single copy between the tensors (written into
// the peers' outputs that lie in shared memory, read from the others), or, where
// the ranks cannot read each other's memory or more than 961 ranks have no room for their
// block places in a slot, through the slots a piece at a time (a fallback the issuing thread
// runs to its end). Every rank takes the same way: it depends on the largest
// block, which all know. Started, the op owns `blocks` until it completed.
std::unique_ptr<InFlight> post_gather(std::unique_ptr<OpContext> ctx,
                                      std::unique_ptr<GatherBlocks> blocks, Collective c);
void gather(OpContext& ctx, const GatherBlocks& blocks, Collective c);

// reduce_scatter: this rank's block, elements [first, first + count) of the `total` of every
// rank's `in`, reduced in rank order into `out` (which may be that block of `in`): through the
// slots when the whole input fits one, else straight from the peers' buffers (each rank reads
// only its block of theirs); where the ranks cannot read each other's memory, the whole input
// all-reduced through the slots a piece at a time into memory the op holds (a fallback the
// issuing thread runs to its end), and the block copied out.
std::unique_ptr<InFlight> post_reduce_scatter(std::unique_ptr<OpContext> ctx, const void* in,
                                              void* out, size_t first, size_t count,
                                              size_t total, DType dtype, ReduceOp op);
void reduce_scatter(OpContext& ctx, const void* in, void* out, size_t first, size_t count,
                    size_t total, DType dtype, ReduceOp op);
// The same for float16 and bfloat16 above kSlotBytes (their own bytes), run to its end, as
// all_reduce_widened: each chunk of this rank's block widened in the cache, summed in float32,
// divided for Avg, rounded once into `out`. False, having done nothing, where it does not
// apply (the same answer on every rank).
bool reduce_scatter_widened(OpContext& ctx, const void* in, void* out, size_t first,
                            size_t count, size_t total, DType dtype, ReduceOp op);
// The same with the input as W blocks lying anywhere (the list form; `blocks[r]` is rank r's
// block, their bytes adding up to `total` elements), read where they lie: no copy of the blocks
// put end to end, except where the ranks cannot read each other's memory. For at most
// listed_reduce_scatter_fits() ranks. `blocks` is read only while the call runs; the memory it
// points to stays the caller's only once the op completed.
bool listed_reduce_scatter_fits(int ranks);
std::unique_ptr<InFlight> post_reduce_scatter(std::unique_ptr<OpContext> ctx,
                                              std::span<const InputPiece> blocks, void* out,
                                              size_t first, size_t count, size_t total,
                                              DType dtype, ReduceOp op);
void reduce_scatter(OpContext& ctx, std::span<const InputPiece> blocks, void* out, size_t first,
                    size_t count, size_t total, DType dtype, ReduceOp op);

// reduce to `root` (`out`, on the root only; null elsewhere): through the slots up to a slot;
// above, each rank reduces its 1/W slice straight from the peers' inputs (the root's into its
// output, the others' into memory the op holds) and the root copies the slices; slot by slot
// where the ranks cannot read each other's memory. In rank order, as all_reduce.
std::unique_ptr<InFlight> post_reduce(std::unique_ptr<OpContext> ctx, const void* in, void* out,
                                      size_t count, int root, DType dtype, ReduceOp op);
// Run to completion; records nothing (reduce's body records what ran for every algorithm).
void reduce(OpContext& ctx, const void* in, void* out, size_t count, int root, DType dtype,
            ReduceOp op);

}  // namespace ferry::detail::shm
