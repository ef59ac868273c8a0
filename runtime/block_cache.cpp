#include <ferry/runtime/block_cache.h>

#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>

#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <thread>

namespace ferry {
namespace {

constexpr std::align_val_t kAlign{detail::kBlockAlignment};

size_t limit_from_environment() { return static_cast<size_t>(config().host_cache_mb) << 20; }

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
        free_.erase(pick);
        held_ -= nbytes;
        return block;
      }
    }
    return ::operator new(nbytes, kAlign);
  }

  void release(void* block, size_t nbytes) {
    std::map<uint64_t, Entry> evicted;  // freed outside the lock
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (nbytes > limit_) {
        evicted.emplace(0, Entry{block, nbytes});
      } else {
        while (held_ + nbytes > limit_) evict_oldest(evicted);
        free_.emplace(nbytes, Entry{block, nbytes, ++clock_, std::this_thread::get_id()});
        held_ += nbytes;
      }
    }
    for (auto& [stamp, e] : evicted) ::operator delete(e.block, kAlign);
  }

  void clear() {
    std::multimap<size_t, Entry> all;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      all.swap(free_);
      held_ = 0;
    }
    for (auto& [size, e] : all) ::operator delete(e.block, kAlign);
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
};

// Never destroyed: tensors in static objects may release their blocks during exit.
BlockCache& cache() {
  static BlockCache* c = new BlockCache();
  return *c;
}

}  // namespace

void release_cached_blocks() { cache().clear(); }

size_t cached_block_bytes() { return cache().held(); }

namespace detail {

void* acquire_block(size_t nbytes) {
  if (nbytes < kMinCachedBytes) return ::operator new(nbytes, kAlign);
  return cache().acquire(nbytes);
}

void release_block(void* block, size_t nbytes) {
  if (nbytes < kMinCachedBytes) return ::operator delete(block, kAlign);
  cache().release(block, nbytes);
}

}  // namespace detail
}  // namespace ferry
