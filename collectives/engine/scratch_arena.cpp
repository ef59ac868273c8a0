#include <ferry/collectives/engine/scratch_arena.h>

#include <ferry/runtime/error.h>

#include <cstdlib>

namespace ferry::detail {

ScratchArena::~ScratchArena() {
  for (char* p : data_) std::free(p);
}

char* ScratchArena::get(int slot, size_t bytes) {
  if (bytes > capacity_[slot]) {
    std::free(data_[slot]);
    size_t rounded = (bytes + 4095) / 4096 * 4096;
    data_[slot] = static_cast<char*>(std::aligned_alloc(64, rounded));
    FERRY_CHECK(data_[slot] != nullptr, Error, "scratch allocation of ", rounded, " bytes failed");
    capacity_[slot] = rounded;
  }
  return data_[slot];
}

void ScratchArena::leak() {
  for (int i = 0; i < kSlots; ++i) {
    data_[i] = nullptr;
    capacity_[i] = 0;
  }
}

}  // namespace ferry::detail
