#include <ferry/runtime/recycled.h>

#include <cstdint>
#include <new>

namespace ferry::detail {
namespace {

constexpr size_t kGrain = 16;
constexpr size_t kClasses = kMaxRecycledBytes / kGrain;

struct FreeBlock {
  FreeBlock* next;
};

struct FreeLists {
  FreeBlock* head[kClasses] = {};
  uint32_t count[kClasses] = {};
  ~FreeLists();
};

// Set when the thread's lists were destroyed (the thread is ending): a block freed by a
// thread_local destructor that runs later goes straight back to ::operator delete. A trivial
// thread_local stays readable until the thread's storage is gone.
thread_local bool lists_gone = false;
thread_local FreeLists lists;

FreeLists::~FreeLists() {
  lists_gone = true;
  for (FreeBlock*& h : head) {
    while (h != nullptr) {
      FreeBlock* next = h->next;
      ::operator delete(static_cast<void*>(h));
      h = next;
    }
  }
}

// The class of a block of `bytes` (1..kMaxRecycledBytes): every block of a class has the
// class's largest size, so any of them serves any request of the class.
size_t class_of(size_t bytes) { return (bytes + kGrain - 1) / kGrain - 1; }

}  // namespace

void* recycled_alloc(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes > kMaxRecycledBytes || lists_gone) return ::operator new(bytes);
  const size_t c = class_of(bytes);
  if (FreeBlock* b = lists.head[c]) {
    lists.head[c] = b->next;
    lists.count[c] -= 1;
    return b;
  }
  return ::operator new((c + 1) * kGrain);
}

void recycled_free(void* block, size_t bytes) noexcept {
  if (block == nullptr) return;
  if (bytes == 0) bytes = 1;
  if (bytes > kMaxRecycledBytes || lists_gone) {
    ::operator delete(block);
    return;
  }
  const size_t c = class_of(bytes);
  if (lists.count[c] >= kKeptPerClass) {
    ::operator delete(block);
    return;
  }
  auto* b = static_cast<FreeBlock*>(block);
  b->next = lists.head[c];
  lists.head[c] = b;
  lists.count[c] += 1;
}

}  // namespace ferry::detail
