// A cache of large host blocks for tensor storage.
//
// A training step allocates the same large tensors every time (a collective's output, the
// gradient its backward returns). glibc hands blocks of that size back to the kernel when they
// are freed, so each step page-faults and zero-fills them again: at 16 MiB that cost 5-10% of a
// two-rank all_reduce (measured with ferry-bench --differentiable). Blocks of at least
// kMinCachedBytes are kept here after their tensor dies and reused for the next request of
// the same size class (eight per power of two: a block is at most 12.5% larger than asked, so
// tensors whose size changes a little from step to step still find one), preferring a block
// the requesting thread released itself (ranks run as threads of one process share the cache,
// and a block another core wrote last costs the next write a coherence miss per line); the
// least recently released go first when the cache is over its limit.
// The threshold is glibc's own for handing blocks to mmap (128 KiB): smaller ones stay in
// malloc's heap and are reused without faults anyway. They are kept apart, a few of each size
// class per thread (block_cache.cpp): aligned allocation in glibc is slow, and a steady
// training step then makes no malloc call for its smaller tensors either.
//
// Blocks of at least kHugeMinBytes are mapped on their own, starting on a 2 MiB boundary, and
// marked for transparent huge pages (madvise; hosts whose THP setting is "madvise", the common
// default, give anonymous memory 4 KiB pages otherwise). The single-copy collectives read a
// peer's buffer with process_vm_readv, which pins every page of it on every call: in a two-rank
// 16 MiB all_reduce the pinning was 23% of the op's time. With 2 MiB pages the 16-64 MiB
// all_reduce, all_gather, reduce_scatter and all_to_all of two MPI ranks took 0.51-0.86x the
// time (memcpy and the reductions also miss the TLB less; docs/shm-benchmarks.md). Blocks of
// 128 KiB up to 2 MiB share huge pages, carved from the regions of the huge page arena
// (huge_arena.h) rather than each rounded up to one: the same ops on two MPI ranks' ordinary
// tensors took 0.52-1.0x the time at 128 KiB-1 MiB, most rows 0.6-0.75x (1 MiB all_gather 41
// -> 21 us in place, all_to_all 57 -> 36, reduce_scatter 59 -> 36, all_reduce 117 -> 75 out of
// place).
//
//   FERRY_HOST_CACHE_MB  the most the cache holds, in MiB (default 256; 0 turns it off, and
//                        the small blocks' lists too)
//   FERRY_HUGE_PAGES     0: large blocks from malloc in small pages, as before (default 1)
#pragma once

#include <cstddef>

namespace ferry {

// Frees every cached block (torch.cuda.empty_cache's counterpart); tensors alive keep theirs.
// The shared arena's free blocks give their pages back too (shared_arena.h).
// Of the small blocks, those the calling thread keeps (other threads free theirs as they end).
void release_cached_blocks();
// Bytes held by the cache now, not counting blocks in use or the threads' small blocks.
size_t cached_block_bytes();

namespace detail {

inline constexpr size_t kMinCachedBytes = size_t{128} << 10;
inline constexpr size_t kBlockAlignment = 64;  // every block, cached or not
inline constexpr size_t kHugePageBytes = size_t{2} << 20;
// Blocks of at least this many bytes (their size class's) start on a huge page boundary.
inline constexpr size_t kHugeMinBytes = kHugePageBytes;

// Blocks under kMinCachedBytes bypass the cache (they go to the threads' lists). release_block takes the size acquired.
void* acquire_block(size_t nbytes);
void release_block(void* block, size_t nbytes);
// Bytes of blocks under kMinCachedBytes the calling thread keeps for reuse (tests, FERRY_DEBUG).
size_t small_block_bytes_kept();

}  // namespace detail
}  // namespace ferry
