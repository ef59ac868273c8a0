// Blocks of the process's shared arena that a group's all-to-alls copy their send blocks into
// (internal; shm_all_to_all.cpp says when), kept from op to op.
//
// The arena's own bookkeeping allocates on the heap when a block is carved or given back; a
// training step's all-to-alls ask for the same few sizes again and again, so a few blocks kept
// here serve them with no allocation. Not thread-safe: the group's lock guards it.
#pragma once

#include <ferry/runtime/shared_arena.h>

#include <array>
#include <cstddef>

namespace ferry::detail::shm {

class StagingBlocks {
 public:
  StagingBlocks() = default;
  StagingBlocks(const StagingBlocks&) = delete;
  StagingBlocks& operator=(const StagingBlocks&) = delete;
  ~StagingBlocks() {
    for (Kept& k : kept_)
      if (k.block != nullptr) release_shared_block(k.block, k.bytes);
  }

  // A block of at least `bytes`: the smallest kept one that holds them without wasting more
  // than as much again, else a new one from the arena (which throws as acquire_shared_block
  // does). `*got`: the block's size, to give it back with.
  void* take(size_t bytes, const char* op, size_t* got) {
    Kept* best = nullptr;
    for (Kept& k : kept_)
      if (k.block != nullptr && k.bytes >= bytes && k.bytes / 2 <= bytes &&
          (best == nullptr || k.bytes < best->bytes))
        best = &k;
    if (best != nullptr) {
      void* block = best->block;
      *got = best->bytes;
      *best = Kept{};
      return block;
    }
    *got = bytes;
    return acquire_shared_block(bytes, op);
  }

  // Keeps `block` (`bytes` as take() said) for a later take, or gives it back to the arena
  // when every place is taken.
  void give(void* block, size_t bytes) {
    for (Kept& k : kept_) {
      if (k.block == nullptr) {
        k = Kept{block, bytes};
        return;
      }
    }
    release_shared_block(block, bytes);
  }

 private:
  struct Kept {
    void* block = nullptr;
    size_t bytes = 0;
  };
  std::array<Kept, 8> kept_{};
};

}  // namespace ferry::detail::shm
