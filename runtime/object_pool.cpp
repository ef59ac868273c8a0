#include <ferry/runtime/object_pool.h>

#include <cstdint>
#include <mutex>

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

// Blocks between threads. A thread that frees what others made (a group's worker dropping an
// op the caller issued, a backward thread dropping the forward's nodes) fills its lists and
// then had to free every further block, while the thread that makes them found its lists empty
// and allocated every one: a malloc and a free per object and step, however long the run.
// Instead a full list hands a batch of its blocks to the depot, and an empty one takes a batch
// from there, one lock per batch. The depot keeps at most kDepotMaxHeld bytes; its blocks live
// until the process ends (a thread's lists are freed when it ends, the depot's never).
constexpr uint32_t kBatch = 32;
constexpr size_t kDepotMaxHeld = size_t{4} << 20;

struct Depot {
  std::mutex mu;
  void* heads[kClasses] = {};
  size_t held = 0;  // bytes
};
Depot& depot() {
  static auto* d = new Depot();  // never destroyed: threads may give blocks back during exit
  return *d;
}

// Moves up to kBatch blocks of class c from the depot to the thread's list; false when none.
[[maybe_unused]] bool refill(Lists& l, size_t c) {
  const size_t size = (c + 1) * kClassBytes;
  Depot& d = depot();
  std::lock_guard<std::mutex> lock(d.mu);
  for (uint32_t n = 0; n < kBatch && d.heads[c] != nullptr; ++n) {
    void* block = d.heads[c];
    d.heads[c] = *static_cast<void**>(block);
    d.held -= size;
    *static_cast<void**>(block) = l.heads[c];
    l.heads[c] = block;
    ++l.counts[c];
    l.held += size;
  }
  return l.heads[c] != nullptr;
}

// Moves kBatch blocks of class c (the list holds at least that many) from the thread's list to
// the depot; false when the depot is full.
[[maybe_unused]] bool spill(Lists& l, size_t c) {
  const size_t size = (c + 1) * kClassBytes;
  Depot& d = depot();
  std::lock_guard<std::mutex> lock(d.mu);
  if (d.held + kBatch * size > kDepotMaxHeld) return false;
  for (uint32_t n = 0; n < kBatch; ++n) {
    void* block = l.heads[c];
    l.heads[c] = *static_cast<void**>(block);
    --l.counts[c];
    l.held -= size;
    *static_cast<void**>(block) = d.heads[c];
    d.heads[c] = block;
    d.held += size;
  }
  return true;
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
  if (l.heads[c] != nullptr || refill(l, c)) {
    if (!l.armed) arm(l);  // the lists hold blocks from the depot
    return pop(l, c);
  }
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
    if (l.counts[c] < kBatch || !spill(l, c)) {
      ::operator delete(block);
      return;
    }
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
