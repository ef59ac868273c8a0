// Collective algorithms over point-to-point (internal).
//
// Written once over OpContext (the engine's point-to-point context), they serve every transport
// that has no native collectives (local, UCX). Each works on raw bytes laid out in per-rank
// blocks; the ops (collectives/ops/) validate arguments and turn tensors into these layouts.
// Ranks are group ranks. Reductions receive element counts and a dtype that `combine` accepts.
#pragma once

#include <ferry/collectives/collectives.h>
#include <ferry/collectives/engine/op_context.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ferry::detail {

// Block k of a buffer: `bytes[k]` bytes at `offset[k]`.
struct Blocks {
  std::vector<size_t> offset;
  std::vector<size_t> bytes;
  size_t total() const { return offset.empty() ? 0 : offset.back() + bytes.back(); }
  size_t max_bytes() const;
};
// Contiguous blocks of rows[k] * row_bytes bytes, in rank order.
Blocks contiguous_blocks(const std::vector<int64_t>& rows, size_t row_bytes);
// `count` elements cut into `parts` nearly equal blocks (the first count % parts get one more).
Blocks even_blocks(size_t count, int parts, size_t elem_bytes);
// `parts` blocks of `block_bytes` each.
Blocks equal_blocks(int parts, size_t block_bytes);
// Blocks in lists taken from the running thread's spares (ThreadSpares, object_pool.h) and
// given back, emptied, when it goes: a queued op runs on its group's worker, so its block lists
// are refilled at each call instead of allocated.
class SpareBlocks {
 public:
  // even_blocks(count, parts, elem_bytes).
  SpareBlocks(size_t count, int parts, size_t elem_bytes);
  // contiguous_blocks(rows, row_bytes).
  SpareBlocks(std::span<const int64_t> rows, size_t row_bytes);
  ~SpareBlocks();
  SpareBlocks(const SpareBlocks&) = delete;
  SpareBlocks& operator=(const SpareBlocks&) = delete;
  const Blocks& get() const { return blocks_; }

 private:
  Blocks blocks_;
};

struct ReduceSpec {
  DType dtype;  // a dtype `combine` accepts
  ReduceOp op;  // never Avg
  size_t elem_bytes() const { return dtype_size(dtype); }
};

// ---- ring (bandwidth-optimal: each rank moves (W-1)/W of the data per phase) ----
// After it, `out` holds the reduction over ranks of block `rank` of `in`. `work` is either null
// (a scratch carry is used and `in` is left unchanged) or a buffer laid out like `in` that may
// be overwritten (may be `in` itself); then the result is written into work's block `rank` too.
void ring_reduce_scatter(OpContext& ctx, const char* in, char* work, char* out,
                         const Blocks& blocks, const ReduceSpec& spec);
// The same with block k of the input read at in_block[k] (the blocks need not be one buffer:
// reduce_scatter's list form); `work`, if given, is still one buffer laid out by `blocks`.
void ring_reduce_scatter(OpContext& ctx, const char* const* in_block, char* work, char* out,
                         const Blocks& blocks, const ReduceSpec& spec);
// Afterwards every block of `buf` is in place. Block `rank` must be in place already, unless
// `own` (optional) says where this rank's block comes from when it is not yet in place in `buf`:
// it is sent from there and copied into place while the first exchange is under way, so the
// copy overlaps the transfer instead of preceding it.
void ring_all_gather(OpContext& ctx, char* buf, const Blocks& blocks,
                     const char* own = nullptr);
// reduce_scatter + all_gather; `out` may be `in`.
void ring_all_reduce(OpContext& ctx, const char* in, char* out, size_t count,
                     const ReduceSpec& spec);

// ---- direct (every rank talks to every rank at once; latency-optimal for few ranks) ----
void direct_all_gather(OpContext& ctx, char* buf, const Blocks& blocks, const char* own = nullptr);

// ---- binomial trees (log2(W) rounds; latency-optimal for small payloads) ----
void tree_broadcast(OpContext& ctx, char* buf, size_t bytes, int root);
// `out` receives the reduction on root; elsewhere it is ignored (may be null).
void tree_reduce(OpContext& ctx, const char* in, char* out, size_t count, int root,
                 const ReduceSpec& spec);

// ---- recursive doubling (log2(W) exchange rounds of the whole payload; the latency-optimal
// all_reduce for small payloads) ----
// `out` may be `in`.
// ---- direct exchange for small all_reduce (one round, all of it posted at once) ----
// Posts the exchange: `bytes` of `in` to every other rank; rank k's payload lands at
// gathered + k * bytes (W * bytes in all).
void post_direct_all_reduce(OpContext& ctx, const char* in, char* gathered, size_t bytes);
// After the exchange completed: `out` = every rank's payload combined in rank order (the same
// bits on every rank). `out` may be `in`.
void finish_direct_all_reduce(int rank, int size, const char* in, char* out, char* gathered,
                              size_t count, const ReduceSpec& spec);
// Both, with the group's scratch for the payloads.
void direct_all_reduce(OpContext& ctx, const char* in, char* out, size_t count,
                       const ReduceSpec& spec);
void recursive_doubling_all_reduce(OpContext& ctx, const char* in, char* out, size_t count,
                                   const ReduceSpec& spec);

// ---- hierarchical (ranks on several hosts): a ring reduce-scatter inside each host, an
// all_reduce of each slice among one rank per host, a ring all_gather inside each host ----
// `out` may be `in`. Every rank ends with the same bits (hierarchical.cpp).
void hierarchical_all_reduce(OpContext& ctx, const char* in, char* out, size_t count,
                             const ReduceSpec& spec);
// all_gather and reduce_scatter for ranks on several hosts: each block crosses between two
// hosts once, through one rank of the receiving host, and moves inside the hosts in a second
// round (hierarchical_blocks.cpp, which gives the reduction's order). all_gather: as
// ring_all_gather's `buf`, `blocks` and `own`. reduce_scatter: `out` receives the reduction of
// block `rank`; it may be that block of the input, which is otherwise left unchanged.
void hierarchical_all_gather(OpContext& ctx, char* buf, const Blocks& blocks,
                             const char* own = nullptr);
void hierarchical_reduce_scatter(OpContext& ctx, const char* in, char* out, const Blocks& blocks,
                                 const ReduceSpec& spec);
void hierarchical_reduce_scatter(OpContext& ctx, const char* const* in_block, char* out,
                                 const Blocks& blocks, const ReduceSpec& spec);

// ---- pairwise exchange: at step s rank r sends to r+s and receives from r-s ----
// send[j] / recv[k]: the buffer going to rank j / coming from rank k.
struct Exchange {
  std::vector<const char*> send;
  std::vector<size_t> send_bytes;
  std::vector<char*> recv;
  std::vector<size_t> recv_bytes;
};
void pairwise_all_to_all(OpContext& ctx, const Exchange& x);
// The same, posted without waiting (the op's Work waits; `x`'s lists may go once this returns).
void post_pairwise_all_to_all(OpContext& ctx, const Exchange& x);
// The same exchange of contiguous blocks, posted without waiting (the op's Work waits): block
// k of `send` (bytes send_bytes[k] at send_offset[k]) goes to rank k, the block from rank k
// lands at recv + recv_offset[k]; the own block is copied here. The arrays hold one entry per
// rank.
void post_pairwise_all_to_all(OpContext& ctx, const char* send, const size_t* send_offset,
                              const size_t* send_bytes, char* recv, const size_t* recv_offset,
                              const size_t* recv_bytes);

// ---- linear (root talks to every rank) ----
// On root, recv[k] receives rank k's `in`; own block copied locally.
void linear_gather(OpContext& ctx, const char* in, size_t bytes, const std::vector<char*>& recv,
                   const std::vector<size_t>& recv_bytes, int root);
void linear_scatter(OpContext& ctx, const std::vector<const char*>& send,
                    const std::vector<size_t>& send_bytes, char* out, size_t bytes, int root);

// ---- dissemination barrier: ceil(log2 W) rounds of zero-byte messages ----
void dissemination_barrier(OpContext& ctx);

}  // namespace ferry::detail
