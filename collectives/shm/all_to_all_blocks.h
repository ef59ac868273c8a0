// The blocks of an all-to-all as the shared-memory path reads and writes them (internal).
//
// An all_to_all_single moves one block per rank and side; the laid-out all-to-alls (torchrec's
// pooled embeddings, whose blocks are columns of a matrix, and the KJT's several parts) move
// one per part, rank and side, and a block may be a list of strided runs rather than one span.
// The shared-memory path moves each block straight from the sender's tensor into the
// receiver's, through both layouts at once (the sender writes it, or the receiver reads it:
// shm_all_to_all.cpp): one copy, with no packing on the sender nor unpacking on the receiver.
#pragma once

#include <ferry/backends/byte_layout.h>

#include <cstddef>

namespace ferry::detail::shm {

// One block: `bytes` at `span` when `runs.count` is 0, else the runs over `runs.base`.
struct BlockRef {
  char* span = nullptr;
  size_t bytes = 0;
  ByteRunsRef runs;
};

// An all-to-all's blocks, which stay where they are until the op completed on this rank (its
// peers read its send blocks until then).
class AllToAllBlocks {
 public:
  virtual ~AllToAllBlocks() = default;
  virtual size_t parts() const = 0;
  // Part p's block for group rank r (send), or from it (receive).
  virtual BlockRef send(size_t part, int r) const = 0;
  virtual BlockRef recv(size_t part, int r) const = 0;
};

}  // namespace ferry::detail::shm
