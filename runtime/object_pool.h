// ferry::detail::make_pooled: shared objects whose memory comes from per-thread free lists
// (internal; not installed).
//
// A training step makes and drops the same small objects every time: each tensor's
// shared_ptr control block, each tape node, each variable's state. Through malloc that was
// about a third of a DLRM step's heap allocations. make_pooled<T>(args...) is
// std::make_shared<T> with its one block (object and control block together) taken from the
// calling thread's list of blocks of that size class, and given back to the list of the thread
// that drops the last reference. In a steady state every list holds what the next step takes,
// so the step calls malloc for none of them.
//
// Size classes are 16 bytes apart up to kPoolMaxBytes; larger objects go to operator new. A
// thread keeps at most kPoolPerClass blocks of a class (a thread that only frees, such as a
// worker dropping another thread's objects, does not grow without bound) and frees its lists
// when it ends. Under AddressSanitizer the pool is bypassed, so a use after free is still
// reported.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>

namespace ferry::detail {

inline constexpr size_t kPoolMaxBytes = 1024;
inline constexpr size_t kPoolPerClass = 256;

// A block of at least `bytes`, aligned for any standard type, and its return; `bytes` must be
// the same in both calls. Over kPoolMaxBytes these are operator new and delete.
void* pool_take(size_t bytes);
void pool_give(void* block, size_t bytes) noexcept;
// Blocks the calling thread keeps (tests).
size_t pool_blocks_kept();

template <class T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <class U>
  PoolAllocator(const PoolAllocator<U>&) noexcept {}  // NOLINT: rebinding, as std::allocator

  T* allocate(size_t n) {
    static_assert(alignof(T) <= alignof(std::max_align_t), "over-aligned types are not pooled");
    if (n > kPoolMaxBytes / sizeof(T)) return std::allocator<T>().allocate(n);
    return static_cast<T*>(pool_take(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept {
    if (n > kPoolMaxBytes / sizeof(T)) {
      std::allocator<T>().deallocate(p, n);
    } else {
      pool_give(p, n * sizeof(T));
    }
  }
  template <class U>
  bool operator==(const PoolAllocator<U>&) const noexcept {
    return true;
  }
};

template <class T, class... Args>
std::shared_ptr<T> make_pooled(Args&&... args) {
  return std::allocate_shared<T>(PoolAllocator<T>(), std::forward<Args>(args)...);
}

}  // namespace ferry::detail
