#include <ferry/runtime/object_pool.h>

#include <array>
#include <cstdint>

#if defined(__SANITIZE_ADDRESS__)
#define FERRY_POOL_BYPASS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FERRY_POOL_BYPASS 1
#endif
#endif

namespace ferry::detail {
namespace {

constexpr size_t kClassBytes = 16;
constexpr size_t kClasses = kPoolMaxBytes / kClassBytes;
constexpr size_t kPoolMaxHeld = size_t{1} << 20;  // bytes a thread keeps at most

// Classes 0, 1, ... hold blocks of 16, 32, ... bytes; a zero-byte request takes the smallest.
[[maybe_unused]] size_t class_of(size_t bytes) {
  return bytes <= kClassBytes ? 0 : (bytes - 1) / kClassBytes;
}

// One thread's lists: singly linked through the blocks' first word.
class ThreadPool {
 public:
  enum class State : uint8_t { kNotYet, kAlive, kGone };
  ThreadPool() { state() = State::kAlive; }
  ~ThreadPool() {
    state() = State::kGone;
    for (size_t c = 0; c < kClasses; ++c) {
      while (heads_[c] != nullptr) ::operator delete(pop(c));
    }
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Trivially destructible, so still readable while the thread's other statics are destroyed
  // (an object dropped then goes straight to operator delete).
  static State& state() {
    static thread_local State s = State::kNotYet;
    return s;
  }

  void* take(size_t c) {
    if (heads_[c] == nullptr) return ::operator new((c + 1) * kClassBytes);
    return pop(c);
  }
  void give(void* block, size_t c) {
    const size_t bytes = (c + 1) * kClassBytes;
    if (counts_[c] >= kPoolPerClass || held_ + bytes > kPoolMaxHeld) {
      ::operator delete(block);
      return;
    }
    *static_cast<void**>(block) = heads_[c];
    heads_[c] = block;
    ++counts_[c];
    held_ += bytes;
  }
  size_t kept() const {
    size_t n = 0;
    for (uint32_t c : counts_) n += c;
    return n;
  }

 private:
  void* pop(size_t c) {
    void* block = heads_[c];
    heads_[c] = *static_cast<void**>(block);
    --counts_[c];
    held_ -= (c + 1) * kClassBytes;
    return block;
  }

  std::array<void*, kClasses> heads_{};
  std::array<uint32_t, kClasses> counts_{};
  size_t held_ = 0;  // bytes in the lists
};

ThreadPool* this_thread_pool() {
  if (ThreadPool::state() == ThreadPool::State::kGone) return nullptr;
  static thread_local ThreadPool pool;
  return &pool;
}

}  // namespace

void* pool_take(size_t bytes) {
#ifdef FERRY_POOL_BYPASS
  return ::operator new(bytes);
#else
  if (bytes > kPoolMaxBytes) return ::operator new(bytes);
  const size_t c = class_of(bytes);
  if (ThreadPool* pool = this_thread_pool()) return pool->take(c);
  return ::operator new((c + 1) * kClassBytes);
#endif
}

void pool_give(void* block, size_t bytes) noexcept {
#ifdef FERRY_POOL_BYPASS
  (void)bytes;
  ::operator delete(block);
#else
  if (bytes > kPoolMaxBytes) {
    ::operator delete(block);
    return;
  }
  if (ThreadPool* pool = this_thread_pool()) {
    pool->give(block, class_of(bytes));
  } else {
    ::operator delete(block);
  }
#endif
}

size_t pool_blocks_kept() {
  ThreadPool* pool = this_thread_pool();
  return pool != nullptr ? pool->kept() : 0;
}

}  // namespace ferry::detail
