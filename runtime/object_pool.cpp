#include <ferry/runtime/object_pool.h>

#include <cstdint>

namespace ferry::detail {
namespace {

constexpr size_t kClassBytes = 16;
constexpr size_t kClasses = kPoolMaxBytes / kClassBytes;
[[maybe_unused]] constexpr size_t kPoolMaxHeld = size_t{1} << 20;  // bytes a thread keeps at most

// Classes 0, 1, ... hold blocks of 16, 32, ... bytes; a zero-byte request takes the smallest.
[[maybe_unused]] size_t class_of(size_t bytes) {
  return bytes <= kClassBytes ? 0 : (bytes - 1) / kClassBytes;
}

// One thread's lists, singly linked through the blocks' first word. Trivially constructed and
// destroyed, so that reaching them costs one thread-local lookup and no guard: pool_take and
// pool_give run for every tensor a step makes. The lists are freed when the thread ends by a
// Cleaner, registered the first time the thread keeps a block.
struct Lists {
  void* heads[kClasses];
  uint32_t counts[kClasses];
  size_t held;  // bytes in the lists
  bool armed;   // the Cleaner is registered
  bool gone;    // the thread is ending: its lists were freed, blocks go to operator delete
};
constinit thread_local Lists t_lists{};

[[maybe_unused]] void* pop(Lists& l, size_t c) {
  void* block = l.heads[c];
  l.heads[c] = *static_cast<void**>(block);
  --l.counts[c];
  l.held -= (c + 1) * kClassBytes;
  return block;
}

struct Cleaner {
  ~Cleaner() {
    Lists& l = t_lists;
    l.gone = true;
    for (size_t c = 0; c < kClasses; ++c) {
      while (l.heads[c] != nullptr) ::operator delete(pop(l, c));
    }
  }
};

[[maybe_unused]] void arm(Lists& l) {
  static thread_local Cleaner cleaner;
  (void)cleaner;
  l.armed = true;
}

}  // namespace

void* pool_take(size_t bytes) {
#ifdef FERRY_POOL_BYPASS
  return ::operator new(bytes);
#else
  Lists& l = t_lists;
  if (bytes > kPoolMaxBytes || l.gone) return ::operator new(bytes);
  const size_t c = class_of(bytes);
  if (l.heads[c] != nullptr) return pop(l, c);
  return ::operator new((c + 1) * kClassBytes);
#endif
}

void pool_give(void* block, size_t bytes) noexcept {
#ifdef FERRY_POOL_BYPASS
  (void)bytes;
  ::operator delete(block);
#else
  Lists& l = t_lists;
  if (bytes > kPoolMaxBytes || l.gone) {
    ::operator delete(block);
    return;
  }
  const size_t c = class_of(bytes);
  const size_t size = (c + 1) * kClassBytes;
  if (l.counts[c] >= kPoolPerClass || l.held + size > kPoolMaxHeld) {
    ::operator delete(block);
    return;
  }
  if (!l.armed) arm(l);
  *static_cast<void**>(block) = l.heads[c];
  l.heads[c] = block;
  ++l.counts[c];
  l.held += size;
#endif
}

size_t pool_blocks_kept() {
  const Lists& l = t_lists;
  size_t n = 0;
  for (uint32_t count : l.counts) n += count;
  return n;
}

}  // namespace ferry::detail
