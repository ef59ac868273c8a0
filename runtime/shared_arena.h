// The process's shared arena: tensor storage that the other ranks on this host can map
// (internal; Tensor::share_memory_ and empty_shared are its public face).
//
// The collectives' single copy between ranks of one host otherwise reads a peer's tensor
// through the kernel (process_vm_readv), which pins the peer's pages and copies them for every
// op. Storage placed here lies in memory files (memfd_create) that a peer opens once through
// /proc/<pid>/fd and maps, after which it reads the tensor as its own memory.
//
// The arena is a list of chunks, each a memory file mapped once for the life of the process
// (never unmapped, never shrunk, its descriptor kept open so that peers can open it): a
// block's address therefore names its chunk and offset for as long as the process lives, and a
// peer that learned a chunk once keeps its mapping. A chunk is at least kMinSharedChunk (the
// memory file takes pages only as they are touched) and at least the arena's size so far, so a
// process never needs more than a few. Blocks are carved best-fit in pages and coalesced when
// freed; a freed block keeps its pages for the next request (as the block cache does). The
// carving's bookkeeping allocates on the heap, so the last few blocks freed are kept whole
// and handed out again for a request of their size: a training step asks for the same sizes
// at every step and then allocates nothing for them.
//
// Memory files have no name in /dev/shm: nothing is left there on any exit, a crash included;
// the memory is freed when the last process that maps a chunk unmaps it or ends.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry::detail {

// A chunk as a peer finds it: where it lies in the owning process, its size, the descriptor
// the owner keeps open for it, and the memory file's inode (which a peer compares after
// opening the descriptor, so that a reused pid or descriptor is never taken for the chunk).
struct SharedChunk {
  uint64_t address = 0;
  uint64_t bytes = 0;
  uint64_t inode = 0;
  int32_t fd = -1;
  uint32_t pad = 0;
};

inline constexpr size_t kMaxSharedChunks = 48;
inline constexpr size_t kMinSharedChunk = size_t{64} << 20;
// Blocks are whole pages: page-aligned, and a block never shares a page with another.
inline constexpr size_t kSharedGrain = 4096;

// The largest block the arena hands out: 2^46 B (64 TiB), more than a host's memory and far
// enough below SIZE_MAX that rounding a size up to pages or chunks never wraps.
inline constexpr size_t kMaxSharedBlock = size_t{1} << 46;

// A block of at least `nbytes` bytes (0 is taken as 1) in the arena, page-aligned. Throws
// InvalidArgument naming `op` and the bytes asked when `nbytes` is above kMaxSharedBlock, and
// Error naming `op` and why when the arena cannot grow (no memfd_create, out of memory, more
// than kMaxSharedChunks chunks).
void* acquire_shared_block(size_t nbytes, const char* op);
// Gives back a block acquire_shared_block returned for the same `nbytes`.
void release_shared_block(void* block, size_t nbytes);

// The chunks made so far, in order of making (each entry final once counted).
size_t shared_chunk_count();
const SharedChunk& shared_chunk(size_t i);
// Whether [p, p + bytes) lies within one chunk.
bool in_shared_arena(const void* p, size_t bytes);
// Bytes of blocks handed out and not given back (tests).
size_t shared_bytes_in_use();
// Hands the pages of every free block back to the system (release_cached_blocks calls it): a
// freed block otherwise keeps its pages for the next request. The chunks stay mapped, here and
// in the peers that mapped them; a block handed out later takes fresh zero pages as it is
// touched. Returns the bytes of the ranges given back.
size_t release_free_shared_pages();

}  // namespace ferry::detail
