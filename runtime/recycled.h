// Small objects that an operation allocates and frees at every call (a transport's request,
// its matching record, the Work of an op), recycled through free lists of the calling thread
// instead of malloc (internal, not installed).
//
// An 8 B collective costs a few microseconds; each malloc / free pair on its path costs tens
// of nanoseconds, and under several ranks per host a contended arena lock. A block freed here
// goes onto the freeing thread's list for its size class (multiples of 16 B up to
// kMaxRecycledBytes) and is handed out again by that thread's next allocation of that class.
// Each list keeps at most kKeptPerClass blocks (the rest go back to malloc), and a thread's
// lists are freed when it ends, so memory stays bounded whichever thread frees what.
#pragma once

#include <cstddef>

namespace ferry::detail {

inline constexpr size_t kMaxRecycledBytes = 512;
inline constexpr size_t kKeptPerClass = 64;

// `bytes` <= kMaxRecycledBytes use the lists, larger ones go to ::operator new / delete.
// recycled_free takes the size given to recycled_alloc. Alignment: that of ::operator new.
void* recycled_alloc(size_t bytes);
void recycled_free(void* block, size_t bytes) noexcept;

// A base that routes `new Derived` / `delete` through the lists (Derived's own size: with a
// virtual destructor, deleting through a base pointer passes the dynamic type's size).
struct Recycled {
  static void* operator new(size_t bytes) { return recycled_alloc(bytes); }
  static void operator delete(void* block, size_t bytes) noexcept { recycled_free(block, bytes); }
};

// An allocator for std::allocate_shared: the object and its control block in one recycled
// block.
template <class T>
struct RecycledAllocator {
  using value_type = T;
  RecycledAllocator() = default;
  template <class U>
  RecycledAllocator(const RecycledAllocator<U>&) noexcept {}  // NOLINT: rebinding is implicit
  T* allocate(size_t n) { return static_cast<T*>(recycled_alloc(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { recycled_free(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const RecycledAllocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace ferry::detail
