// Scratch memory of a group (internal).
#pragma once

#include <cstddef>

namespace ferry::detail {

// Scratch memory reused across the ops of one group: a fresh 64 MiB buffer per call would cost
// ~20 ms of first-touch page faults. Only the thread running the group's current queued op (its
// worker, or a waiter running the op itself) uses it; ops started at issue use none.
//
// On a group whose ranks share one host, buffers of at least kMinSharedScratch lie in the
// process's shared arena (runtime/shared_arena.h): a 16-bit reduction runs the shared-memory
// path on its float32 copies here, and its peers then read them as their own memory instead of
// through the kernel, which pins every page of every read. Where the arena cannot grow (no
// memfd_create, its chunks used up), ordinary memory serves as before.
class ScratchArena {
 public:
  ScratchArena() = default;
  ScratchArena(const ScratchArena&) = delete;
  ScratchArena& operator=(const ScratchArena&) = delete;
  ~ScratchArena();
  // Buffer number `slot` (0..kSlots-1) with room for at least `bytes`; contents undefined.
  // `shareable`: the group's ranks share a host, so its peers may read the buffer.
  char* get(int slot, size_t bytes, bool shareable);
  // Forgets the buffers without freeing them: a collective that timed out on a transport that
  // cannot cancel it may still write into them.
  void leak();
  static constexpr int kSlots = 4;
  static constexpr size_t kMinSharedScratch = size_t{64} << 10;

 private:
  void release(int slot);

  char* data_[kSlots] = {};
  size_t capacity_[kSlots] = {};
  bool shared_[kSlots] = {};
};

}  // namespace ferry::detail
