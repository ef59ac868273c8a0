#include <ferry/collectives/engine/scratch_arena.h>

#include <ferry/runtime/error.h>
#include <ferry/runtime/shared_arena.h>

#include <cstdlib>

namespace ferry::detail {

ScratchArena::~ScratchArena() {
  for (int i = 0; i < kSlots; ++i) release(i);
}

void ScratchArena::release(int slot) {
  if (data_[slot] == nullptr) return;
  if (shared_[slot])
    release_shared_block(data_[slot], capacity_[slot]);
  else
    std::free(data_[slot]);
  data_[slot] = nullptr;
  capacity_[slot] = 0;
  shared_[slot] = false;
}

char* ScratchArena::get(int slot, size_t bytes, bool shareable) {
  const bool want_shared = shareable && bytes >= kMinSharedScratch;
  // A private buffer large enough is moved to the arena once the group turns out to share a
  // host (placement is learnt after the group's first ops), and kept there after.
  if (bytes <= capacity_[slot] && (shared_[slot] || !want_shared)) return data_[slot];
  release(slot);
  const size_t rounded = (bytes + 4095) / 4096 * 4096;
  if (want_shared) {
    try {
      data_[slot] = static_cast<char*>(acquire_shared_block(rounded, "scratch"));
      capacity_[slot] = rounded;
      shared_[slot] = true;
      return data_[slot];
    } catch (const Error&) {
      // Ordinary memory below: the peers read it through the kernel instead.
    }
  }
  data_[slot] = static_cast<char*>(std::aligned_alloc(64, rounded));
  FERRY_CHECK(data_[slot] != nullptr, Error, "scratch allocation of ", rounded, " bytes failed");
  capacity_[slot] = rounded;
  return data_[slot];
}

void ScratchArena::leak() {
  for (int i = 0; i < kSlots; ++i) {
    data_[i] = nullptr;
    capacity_[i] = 0;
    shared_[i] = false;
  }
}

}  // namespace ferry::detail
