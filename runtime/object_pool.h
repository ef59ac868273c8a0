// ferry::detail::make_pooled, Pooled and PoolAllocator: objects whose memory comes from
// per-thread free lists (internal; not installed).
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
// thread keeps at most kPoolPerClass blocks of a class and 1 MiB in all (a thread that only
// frees, such as a worker dropping another thread's objects, does not grow without bound) and
// frees its lists when it ends. What a full list cannot keep goes, a batch at a time, to a
// process-wide depot (at most 4 MiB), from which a thread whose list is empty takes a batch:
// so the objects a worker drops reach the thread that makes them, instead of a free on one side
// and a malloc on the other every step. Under AddressSanitizer the pool is bypassed, so a use
// after free is still reported.
//
// Pooled (a base class) and PoolAllocator (for allocate_shared) put other per-call objects in
// the same lists; ThreadSpares below keeps whole emptied objects for their buffers.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>

// Under AddressSanitizer (gcc's and clang's spellings) every block goes straight back to
// operator delete.
#if defined(__SANITIZE_ADDRESS__)
#define FERRY_POOL_BYPASS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FERRY_POOL_BYPASS 1
#endif
#endif

namespace ferry::detail {

#ifdef FERRY_POOL_BYPASS
inline constexpr bool kPoolBypassed = true;
#else
inline constexpr bool kPoolBypassed = false;
#endif
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

// A base that routes `new Derived` and `delete` through the pool: per-call objects held by a
// plain or unique pointer (an op's context, a transport's request). With a virtual destructor,
// deleting through a base pointer passes the dynamic type's size, as new took it.
struct Pooled {
  static void* operator new(size_t bytes) { return pool_take(bytes); }
  static void operator delete(void* block, size_t bytes) noexcept { pool_give(block, bytes); }
};

template <class T, class... Args>
std::shared_ptr<T> make_pooled(Args&&... args) {
  return std::allocate_shared<T>(PoolAllocator<T>(), std::forward<Args>(args)...);
}

// Objects whose buffers a thread hands from one step to the next: take() returns one that
// give() kept on this thread (its containers emptied by the giver but with their capacity), or a
// new one; give() keeps up to N. For per-call scratch that a step makes and drops once (a
// lookup's plan), so the next call refills the same buffers instead of allocating them again.
// A giver must empty what refers to other objects first: a kept object lives until the thread
// ends.
template <class T, size_t N = 4>
class ThreadSpares {
 public:
  static T take() {
    Kept* kept = this_thread();
    if (kept == nullptr || kept->count == 0) return T();
    return std::move(kept->items[--kept->count]);
  }
  static void give(T&& object) {
    Kept* kept = this_thread();
    if (kept != nullptr && kept->count < N) kept->items[kept->count++] = std::move(object);
  }

 private:
  enum class State : unsigned char { kNotYet, kAlive, kGone };
  struct Kept {
    Kept() { state() = State::kAlive; }
    ~Kept() { state() = State::kGone; }
    T items[N];
    size_t count = 0;
  };
  // Trivially destructible, so an object given back while the thread's statics are destroyed
  // finds the list gone and is simply dropped.
  static State& state() {
    static thread_local State s = State::kNotYet;
    return s;
  }
  static Kept* this_thread() {
    if (state() == State::kGone) return nullptr;
    static thread_local Kept kept;
    return &kept;
  }
};

// A list (any container with clear()) from this thread's spares for the length of a scope,
// emptied and given back at its end: a call that builds one list per call then allocates none.
template <class List>
class ScopedSpare {
 public:
  ScopedSpare() : list_(ThreadSpares<List>::take()) {}
  ~ScopedSpare() {
    list_.clear();
    ThreadSpares<List>::give(std::move(list_));
  }
  ScopedSpare(const ScopedSpare&) = delete;
  ScopedSpare& operator=(const ScopedSpare&) = delete;
  List& operator*() { return list_; }
  List* operator->() { return &list_; }

 private:
  List list_;
};

}  // namespace ferry::detail
