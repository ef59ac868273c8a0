// Host blocks of 128 KiB up to 2 MiB, carved from regions in 2 MiB pages (internal; the block
// cache's source for blocks of that size, block_cache.h).
//
// The single-copy collectives between ranks of one host read a peer's ordinary tensor through
// the kernel (process_vm_readv), which pins every page of the peer's buffer on every call. A
// block of 2 MiB or more is mapped on its own in huge pages (block_cache.cpp), 512 times fewer
// pages to pin; a smaller one would have to be rounded up to a huge page, 16 times the memory
// of a 128 KiB block. Here the smaller blocks share huge pages instead: regions of at least
// kMinHugeRegion, 2 MiB-aligned and marked for transparent huge pages, are cut best-fit into
// blocks of whole 4 KiB pages, merged again when freed (free_ranges.h).
//
// Memory is ordinary private memory, copied on write into a forked child as malloc's is. A
// region stays mapped for the life of the process and takes pages as they are touched (a huge
// page at a time where the kernel has them; small pages where THP is off). Free ranges keep
// their pages for the next block, up to kMaxHugeArenaFree bytes free; past that, the huge pages
// a freed block leaves wholly free go back to the system, and release_free_huge_arena_pages
// (release_cached_blocks) hands back the pages of every free range.
#pragma once

#include <ferry/runtime/block_cache.h>

#include <cstddef>

namespace ferry::detail {

inline constexpr size_t kHugeArenaMinBytes = kMinCachedBytes;
inline constexpr size_t kMinHugeRegion = size_t{16} << 20;
inline constexpr size_t kMaxHugeArenaFree = size_t{64} << 20;

// A block of `nbytes` (kHugeArenaMinBytes <= nbytes < kHugePageBytes), page-aligned, its
// bytes undefined. Throws std::bad_alloc when no region can be mapped.
void* acquire_huge_arena_block(size_t nbytes);
// Gives back a block acquire_huge_arena_block returned for the same `nbytes`.
void release_huge_arena_block(void* block, size_t nbytes);

// `length` bytes (whole pages) of zeroed private memory starting on a huge page boundary and
// marked for transparent huge pages; where the kernel has none to give (THP off, none free),
// small pages. Unmapped with munmap. Throws std::bad_alloc when it cannot be mapped.
void* map_on_huge_pages(size_t length);

// Bytes of blocks handed out and not given back, and of the regions mapped (tests).
size_t huge_arena_bytes_in_use();
size_t huge_arena_region_bytes();
// Hands the pages of every free range back to the system; a block carved there later takes
// fresh zero pages as it is touched. Returns the bytes of the ranges given back.
size_t release_free_huge_arena_pages();

}  // namespace ferry::detail
