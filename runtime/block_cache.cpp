#include <ferry/runtime/block_cache.h>

#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/huge_arena.h>
#include <ferry/runtime/shared_arena.h>

#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

// Under AddressSanitizer a kept small block is poisoned until it is handed out again, so that
// a tensor's use after its storage died is still reported.
#if defined(__SANITIZE_ADDRESS__)
#define FERRY_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FERRY_ASAN 1
#endif
#endif
#ifdef FERRY_ASAN
#include <sanitizer/asan_interface.h>
#define FERRY_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define FERRY_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define FERRY_POISON(p, n) ((void)(p), (void)(n))
#define FERRY_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace ferry {
namespace {

constexpr std::align_val_t kAlign{detail::kBlockAlignment};

size_t limit_from_environment() { return static_cast<size_t>(config().host_cache_mb) << 20; }

// Blocks of at least detail::kHugeMinBytes are mapped here, 2 MiB-aligned, and marked for
// transparent huge pages (block_cache.h says why). Read once: a block is released the way it
// was acquired, which only its size tells.
bool huge_blocks() {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  static const bool on = config().huge_pages;
  return on;
#else
  return false;
#endif
}

bool mapped_huge(size_t bytes) { return bytes >= detail::kHugeMinBytes && huge_blocks(); }

#if defined(__linux__) && defined(MADV_HUGEPAGE)
constexpr size_t kPageBytes = 4096;

size_t mapped_length(size_t bytes) { return (bytes + kPageBytes - 1) / kPageBytes * kPageBytes; }

// `bytes` of zeroed memory starting on a huge page boundary. The mapping is the block's own
// length (its last part, short of a huge page, stays in small pages: rounding it up would cost
// up to 78% more memory in the 2.25 MiB class, and the cache's limit counts blocks' bytes).
void* map_huge(size_t bytes) { return detail::map_on_huge_pages(mapped_length(bytes)); }

// Blocks of 128 KiB up to 2 MiB share huge pages in the huge page arena (huge_arena.h).
bool in_huge_arena(size_t bytes) {
  return bytes >= detail::kHugeArenaMinBytes && bytes < detail::kHugeMinBytes && huge_blocks();
}
#endif

void* allocate(size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (mapped_huge(bytes)) return map_huge(bytes);
  if (in_huge_arena(bytes)) return detail::acquire_huge_arena_block(bytes);
#endif
  return ::operator new(bytes, kAlign);
}

void deallocate(void* block, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (mapped_huge(bytes)) {
    ::munmap(block, mapped_length(bytes));
    return;
  }
  if (in_huge_arena(bytes)) return detail::release_huge_arena_block(block, bytes);
#endif
  ::operator delete(block, kAlign);
}

class BlockCache {
 public:
  BlockCache() : limit_(limit_from_environment()) {}

  void* acquire(size_t nbytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // The most recently released block of this size that this thread released, else the most
      // recently released one: the likeliest to be in this core's cache. (Ranks as threads of one
      // process share the cache; a block another rank's thread wrote last is in that core's cache,
      // and writing it cost a 1 MiB all-to-all's copy three times the raw one's.) A multimap keeps
      // equal keys in insertion order, so the range runs oldest to newest.
      const auto [first, last] = free_.equal_range(nbytes);
      if (first != last) {
        auto pick = std::prev(last);
        const std::thread::id me = std::this_thread::get_id();
        for (auto it = last; it != first;) {
          if ((--it)->second.owner == me) {
            pick = it;
            break;
          }
        }
        void* block = pick->second.block;
        // The map's node is kept for the next release: a step that frees and takes the same
        // blocks every time then allocates nothing here.
        spare_nodes_.push_back(free_.extract(pick));
        held_ -= nbytes;
        return block;
      }
    }
    return allocate(nbytes);
  }

  void release(void* block, size_t nbytes) {
    std::map<uint64_t, Entry> evicted;  // freed outside the lock
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (nbytes > limit_) {
        evicted.emplace(0, Entry{block, nbytes});
      } else {
        while (held_ + nbytes > limit_) evict_oldest(evicted);
        const Entry entry{block, nbytes, ++clock_, std::this_thread::get_id()};
        if (spare_nodes_.empty()) {
          free_.emplace(nbytes, entry);
        } else {
          auto node = std::move(spare_nodes_.back());
          spare_nodes_.pop_back();
          node.key() = nbytes;
          node.mapped() = entry;
          free_.insert(std::move(node));
        }
        held_ += nbytes;
      }
    }
    for (auto& [stamp, e] : evicted) deallocate(e.block, e.nbytes);
  }

  void clear() {
    std::multimap<size_t, Entry> all;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      all.swap(free_);
      held_ = 0;
    }
    for (auto& [size, e] : all) deallocate(e.block, e.nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    spare_nodes_.clear();
  }

  size_t held() {
    std::lock_guard<std::mutex> lock(mutex_);
    return held_;
  }

 private:
  struct Entry {
    void* block;
    size_t nbytes;
    uint64_t stamp = 0;  // when it was released; the smallest goes first
    std::thread::id owner{};  // the thread that released it
  };

  // Called with the lock held; the cache holds at most limit_ / kMinCachedBytes blocks, so the
  // scan is short.
  void evict_oldest(std::map<uint64_t, Entry>& evicted) {
    auto oldest = free_.begin();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second.stamp < oldest->second.stamp) oldest = it;
    }
    held_ -= oldest->second.nbytes;
    evicted.emplace(oldest->second.stamp, oldest->second);
    free_.erase(oldest);
  }

  std::mutex mutex_;
  const size_t limit_;
  size_t held_ = 0;
  uint64_t clock_ = 0;
  std::multimap<size_t, Entry> free_;  // by size: a request takes an exact match
  // Nodes of blocks taken, reused by the next releases (at most as many as free_ ever held).
  std::vector<std::multimap<size_t, Entry>::node_type> spare_nodes_;
};

// Never destroyed: tensors in static objects may release their blocks during exit.
BlockCache& cache() {
  static BlockCache* c = new BlockCache();
  return *c;
}

// Large blocks come in size classes, eight per power of two (a block is at most 12.5% larger
// than asked): tensors whose size changes from step to step (a batch's ids, the buffers of an
// all-to-all of them) then find a block released by the step before, where exact sizes would
// miss every time and glibc would map, fault in and zero fresh pages for each of them.
size_t large_class_bytes(size_t nbytes) {
  size_t power = 1;
  while (power * 2 <= nbytes) power *= 2;
  const size_t step = power / 8;
  return (nbytes + step - 1) / step * step;
}

// Blocks under detail::kMinCachedBytes: each thread keeps a few of each size class for its next
// requests. A small tensor is made and dropped on every collective call (the placeholder
// linking a request's tape nodes, a 512-byte output), and aligned operator new goes through
// glibc's memalign, which splits a larger chunk every time: 9% of the caller's time in a
// 512-byte torchrec all-to-all. Tensors of 4 to 128 KiB (a step's activations and gradients at
// batch 512, a lookup's rows) were a malloc and a free each per step. A block released by
// another thread than the one that took it joins the releasing thread's lists. Classes are 64
// bytes apart up to kSmallMaxBytes, then eight per power of two as the large blocks'. Each
// thread holds at most kSmallPerClass blocks per class, kSmallMaxHeld bytes of blocks up to
// kSmallMaxBytes and kMediumMaxHeld bytes of the larger ones, and frees them when it ends.
// (Tensors' shared_ptr control blocks were tried here too, 512 kept of the first class: 15
// allocations a step fewer, but two ranks over MPI at batch 128 ran 17% slower, the dense
// forward twice as long, for a reason not found.)
constexpr size_t kSmallMaxBytes = 4096;
constexpr size_t kSmallClassBytes = 64;
constexpr size_t kSmallClasses = kSmallMaxBytes / kSmallClassBytes;
constexpr size_t kMediumClasses = 5 * 8;  // 4 KiB < n < 128 KiB: five powers of two
constexpr size_t kClasses = kSmallClasses + kMediumClasses;
constexpr size_t kSmallPerClass = 8;
constexpr size_t kSmallMaxHeld = size_t{256} << 10;
constexpr size_t kMediumMaxHeld = size_t{4} << 20;

// Blocks between threads, as the object pool's depot (object_pool.cpp): a thread that frees
// what another made (a gradient dropped by a group's worker, an activation by the backward)
// fills its lists and then freed every further block, while the thread that makes them
// allocated every one. A full list gives its block to the depot instead, an empty one takes
// from there; one lock each, on these paths only. At most kDepotMaxHeld bytes; its blocks live
// until the process ends.
constexpr size_t kDepotMaxHeld = size_t{16} << 20;

// The bytes of the blocks of class `cls` (SmallBlocks::class_of).
size_t class_bytes(size_t cls) {
  if (cls < kSmallClasses) return (cls + 1) * kSmallClassBytes;
  const size_t m = cls - kSmallClasses, power = kSmallMaxBytes << (m / 8);
  return power + (m % 8 + 1) * (power / 8);
}

class SmallDepot {
 public:
  // A block of class `cls`, or null.
  void* take(size_t cls, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<void*>& list = free_[cls];
    if (list.empty()) return nullptr;
    void* block = list.back();
    list.pop_back();
    held_ -= bytes;
    return block;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t c = 0; c < kClasses; ++c) {
      for (void* block : free_[c]) {
        FERRY_UNPOISON(block, class_bytes(c));
        ::operator delete(block, kAlign);
      }
      free_[c].clear();
    }
    held_ = 0;
  }
  // False when full (the caller frees the block).
  bool give(size_t cls, size_t bytes, void* block) {
    std::lock_guard<std::mutex> lock(mu_);
    if (held_ + bytes > kDepotMaxHeld) return false;
    free_[cls].push_back(block);
    held_ += bytes;
    return true;
  }

 private:
  std::mutex mu_;
  std::vector<void*> free_[kClasses];
  size_t held_ = 0;
};
SmallDepot& small_depot() {
  static auto* d = new SmallDepot();  // never destroyed: threads give blocks back during exit
  return *d;
}

class SmallBlocks {
 public:
  enum class State { kNotYet, kAlive, kGone };
  SmallBlocks() { state() = State::kAlive; }
  ~SmallBlocks() {
    state() = State::kGone;
    clear();
  }
  // This thread's lists: made on first use, gone once the thread's statics are destroyed.
  static State& state() {
    static thread_local State s = State::kNotYet;
    return s;
  }
  // The class of a block of `nbytes` (0 < nbytes < kMinCachedBytes) and the bytes its blocks
  // have.
  static size_t class_of(size_t nbytes, size_t& bytes) {
    if (nbytes <= kSmallMaxBytes) {
      const size_t cls = (nbytes + kSmallClassBytes - 1) / kSmallClassBytes;
      bytes = cls * kSmallClassBytes;
      return cls - 1;
    }
    bytes = large_class_bytes(nbytes);  // (power, 2 * power], in eighths of power
    size_t log2 = 12, power = kSmallMaxBytes;
    while (power * 2 < bytes) {
      power *= 2;
      ++log2;
    }
    return kSmallClasses + (log2 - 12) * 8 + (bytes - power) / (power / 8) - 1;
  }

  // A block for `nbytes` (of its class's size; under ASan only the first nbytes addressable).
  void* take(size_t nbytes) {
    size_t bytes = 0;
    std::vector<void*>& list = free_[class_of(nbytes, bytes)];
    void* block;
    if (list.empty()) {
      const size_t cls = class_of(nbytes, bytes);
      block = small_depot().take(cls, bytes);
      if (block == nullptr) block = ::operator new(bytes, kAlign);
      FERRY_UNPOISON(block, bytes);
      FERRY_POISON(static_cast<char*>(block) + nbytes, bytes - nbytes);
    } else {
      block = list.back();
      list.pop_back();
      held(bytes) -= bytes;
      FERRY_UNPOISON(block, nbytes);
    }
    return block;
  }
  void give(void* block, size_t nbytes) {
    size_t bytes = 0;
    std::vector<void*>& list = free_[class_of(nbytes, bytes)];
    const size_t limit = bytes <= kSmallMaxBytes ? kSmallMaxHeld : kMediumMaxHeld;
    if (list.size() >= kSmallPerClass || held(bytes) + bytes > limit) {
      FERRY_POISON(block, bytes);
      if (small_depot().give(class_of(nbytes, bytes), bytes, block)) return;
      FERRY_UNPOISON(block, bytes);
      ::operator delete(block, kAlign);
      return;
    }
    if (list.capacity() == 0) list.reserve(kSmallPerClass);
    FERRY_POISON(block, bytes);
    list.push_back(block);
    held(bytes) += bytes;
  }
  size_t held() const { return small_held_ + medium_held_; }
  void clear() {
    for (size_t c = 0; c < kClasses; ++c) {
      for (void* block : free_[c]) {
        FERRY_UNPOISON(block, bytes_of(c));
        ::operator delete(block, kAlign);
      }
      free_[c].clear();
    }
    small_held_ = medium_held_ = 0;
  }

 private:
  size_t& held(size_t bytes) { return bytes <= kSmallMaxBytes ? small_held_ : medium_held_; }
  static size_t bytes_of(size_t cls) { return class_bytes(cls); }

  std::vector<void*> free_[kClasses];
  size_t small_held_ = 0, medium_held_ = 0;
};

SmallBlocks& small_blocks() {
  static thread_local SmallBlocks blocks;
  return blocks;
}

// Whether a block of `nbytes` goes through the threads' lists. FERRY_HOST_CACHE_MB=0 turns them
// off too (to compare with plain allocation, say).
bool kept_small(size_t nbytes) {
  static const bool on = limit_from_environment() > 0;
  return nbytes > 0 && nbytes < detail::kMinCachedBytes && on;
}

}  // namespace

void release_cached_blocks() {
  detail::release_free_shared_pages();  // the shared arena's free blocks, likewise
  cache().clear();
  detail::release_free_huge_arena_pages();  // and the huge page arena's, the cache's included
  small_depot().clear();
  if (SmallBlocks::state() == SmallBlocks::State::kAlive) small_blocks().clear();
}

size_t cached_block_bytes() { return cache().held(); }

namespace detail {

void* acquire_block(size_t nbytes) {
  if (kept_small(nbytes)) return small_blocks().take(nbytes);
  if (nbytes < kMinCachedBytes) return ::operator new(nbytes, kAlign);  // the lists are off
  const size_t bytes = large_class_bytes(nbytes);
  void* block = cache().acquire(bytes);
  FERRY_POISON(static_cast<char*>(block) + nbytes, bytes - nbytes);  // the class's slack
  return block;
}

void release_block(void* block, size_t nbytes) {
  if (kept_small(nbytes)) {
    // A thread whose lists are gone (it is ending) frees the block instead.
    if (SmallBlocks::state() != SmallBlocks::State::kGone)
      return small_blocks().give(block, nbytes);
    size_t bytes = 0;
    (void)SmallBlocks::class_of(nbytes, bytes);
    FERRY_UNPOISON(block, bytes);
    return ::operator delete(block, kAlign);
  }
  if (nbytes < kMinCachedBytes) return ::operator delete(block, kAlign);
  const size_t bytes = large_class_bytes(nbytes);
  FERRY_UNPOISON(block, bytes);
  cache().release(block, bytes);
}

size_t small_block_bytes_kept() {
  return SmallBlocks::state() == SmallBlocks::State::kAlive ? small_blocks().held() : 0;
}

}  // namespace detail
}  // namespace ferry
