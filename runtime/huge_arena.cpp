#include <ferry/runtime/huge_arena.h>

#include <ferry/runtime/free_ranges.h>
#include <ferry/runtime/log.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <new>
#include <optional>
#include <vector>

namespace ferry::detail {
namespace {

constexpr size_t kPageBytes = 4096;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
uintptr_t round_down(uintptr_t n, size_t to) { return n / to * to; }

class HugeArena {
 public:
  static HugeArena& get() {
    static auto* arena = new HugeArena();  // blocks may come back during exit
    return *arena;
  }

  void* acquire(size_t nbytes) {
    const size_t size = round_up(nbytes, kPageBytes);
    std::lock_guard<std::mutex> lock(mu_);
    std::optional<FreeRanges::Place> at = free_.take(size);
    if (!at) {
      grow(size);
      at = free_.take(size);
    }
    in_use_ += size;
    free_bytes_ -= size;
    return reinterpret_cast<void*>(regions_[at->region].address + at->offset);
  }

  void release(void* block, size_t nbytes) {
    const size_t size = round_up(nbytes, kPageBytes);
    const auto at = reinterpret_cast<uintptr_t>(block);
    std::lock_guard<std::mutex> lock(mu_);
    const size_t r = region_of(at, size);
    if (r == regions_.size()) {  // from a destructor: never throws
      FERRY_LOG(Warn, "arena", "the huge page arena was given back a block it never handed out "
                "(internal error): ", nbytes, " B at ", block);
      return;
    }
    const FreeRanges::Range merged = free_.give({r, at - regions_[r].address}, size);
    in_use_ -= size;
    free_bytes_ += size;
    if (free_bytes_ > kMaxHugeArenaFree) {
      // The whole huge pages of the range this block joined: touched again, each costs a
      // fault and a zeroed page, which a steady step (its blocks kept by the cache) never pays.
      const uintptr_t start = regions_[r].address + merged.at.offset;
      const uintptr_t first = round_up(start, kHugePageBytes);
      const uintptr_t end = round_down(start + merged.bytes, kHugePageBytes);
      if (end > first) discard(first, end - first);
    }
  }

  size_t release_free_pages() {
    std::lock_guard<std::mutex> lock(mu_);
    size_t bytes = 0;
    free_.for_each([&](size_t r, size_t offset, size_t size) {
      bytes += discard(regions_[r].address + offset, size);
    });
    return bytes;
  }

  size_t in_use() {
    std::lock_guard<std::mutex> lock(mu_);
    return in_use_;
  }
  size_t mapped() {
    std::lock_guard<std::mutex> lock(mu_);
    return total_;
  }

 private:
  struct Region {
    uintptr_t address;
    size_t bytes;
  };

  HugeArena() = default;

  size_t region_of(uintptr_t at, size_t size) const {
    for (size_t i = 0; i < regions_.size(); ++i) {
      const Region& g = regions_[i];
      if (at >= g.address && at - g.address <= g.bytes && size <= g.bytes - (at - g.address))
        return i;
    }
    return regions_.size();
  }

  // A region that holds `size` bytes at least, of at least kMinHugeRegion and of the arena's
  // size so far (a process has a few), starting on a huge page. mu_ held.
  void grow(size_t size) {
    const size_t bytes = std::max({round_up(size, kHugePageBytes), kMinHugeRegion, total_});
    const auto first = reinterpret_cast<uintptr_t>(map_on_huge_pages(bytes));
    free_.add_region(regions_.size(), bytes);
    regions_.push_back(Region{first, bytes});
    total_ += bytes;
    free_bytes_ += bytes;
  }

  // Gives the pages of [at, at + bytes) back (page-aligned); their next touch faults in zeros.
  static size_t discard(uintptr_t at, size_t bytes) {
    return ::madvise(reinterpret_cast<void*>(at), bytes, MADV_DONTNEED) == 0 ? bytes : 0;
  }

  std::mutex mu_;
  std::vector<Region> regions_;
  size_t total_ = 0;       // bytes of every region
  size_t in_use_ = 0;      // bytes handed out
  size_t free_bytes_ = 0;  // bytes in the free ranges
  FreeRanges free_;        // by region
};

}  // namespace

void* map_on_huge_pages(size_t length) {
  const size_t span = length + kHugePageBytes - kPageBytes;  // room to align the start
  void* p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  const auto start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = round_up(start, kHugePageBytes);
  if (first > start) ::munmap(p, first - start);
  if (const size_t tail = start + span - (first + length); tail > 0)
    ::munmap(reinterpret_cast<void*>(first + length), tail);
#ifdef MADV_HUGEPAGE
  (void)::madvise(reinterpret_cast<void*>(first), length, MADV_HUGEPAGE);  // refused: small pages
#endif
  return reinterpret_cast<void*>(first);
}

void* acquire_huge_arena_block(size_t nbytes) { return HugeArena::get().acquire(nbytes); }

void release_huge_arena_block(void* block, size_t nbytes) {
  HugeArena::get().release(block, nbytes);
}

size_t huge_arena_bytes_in_use() { return HugeArena::get().in_use(); }
size_t huge_arena_region_bytes() { return HugeArena::get().mapped(); }
size_t release_free_huge_arena_pages() { return HugeArena::get().release_free_pages(); }

}  // namespace ferry::detail
