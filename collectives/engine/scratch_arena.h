// Scratch memory of a group (internal).
#pragma once

#include <cstddef>

namespace ferry::detail {

// Scratch memory reused across the ops of one group: a fresh 64 MiB buffer per call would cost
// ~20 ms of first-touch page faults. Only the thread running the group's current queued op (its
// worker, or a waiter running the op itself) uses it; ops started at issue use none.
class ScratchArena {
 public:
  ScratchArena() = default;
  ScratchArena(const ScratchArena&) = delete;
  ScratchArena& operator=(const ScratchArena&) = delete;
  ~ScratchArena();
  // Buffer number `slot` (0..kSlots-1) with room for at least `bytes`; contents undefined.
  char* get(int slot, size_t bytes);
  // Forgets the buffers without freeing them: a collective that timed out on a transport that
  // cannot cancel it may still write into them.
  void leak();
  static constexpr int kSlots = 4;

 private:
  char* data_[kSlots] = {};
  size_t capacity_[kSlots] = {};
};

}  // namespace ferry::detail
