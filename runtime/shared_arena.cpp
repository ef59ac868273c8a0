#include <ferry/runtime/shared_arena.h>

#include <ferry/runtime/error.h>
#include <ferry/runtime/free_ranges.h>
#include <ferry/runtime/log.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <mutex>
#include <string>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ferry::detail {
namespace {

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

class SharedArena {
 public:
  static SharedArena& get() {
    static auto* arena = new SharedArena();  // its chunks live as long as the process
    return *arena;
  }

  void* acquire(size_t nbytes, const char* op) {
    FERRY_CHECK(nbytes <= kMaxSharedBlock, InvalidArgument, op, ": cannot place ", nbytes,
                " B in shared memory: a block holds at most ", kMaxSharedBlock, " B (",
                kMaxSharedBlock >> 40, " TiB)");
    const size_t size = round_up(std::max<size_t>(nbytes, 1), kSharedGrain);
    std::lock_guard<std::mutex> lock(mu_);
    for (Kept& k : kept_) {
      if (k.size != size) continue;
      k.size = 0;
      in_use_ += size;
      return reinterpret_cast<void*>(k.address);
    }
    std::optional<FreeRanges::Place> at = free_.take(size);
    if (!at) {
      // The kept blocks back in the free ranges, coalesced, before the arena grows.
      for (Kept& k : kept_)
        if (k.size != 0) give_back(k);
      at = free_.take(size);
    }
    if (!at) {
      grow(size, op);
      at = free_.take(size);
    }
    in_use_ += size;
    return reinterpret_cast<void*>(chunks_[at->region].address + at->offset);
  }

  void release(void* block, size_t nbytes) {
    // A size acquire refused is no block of the arena's (and would wrap when rounded up).
    const size_t size =
        nbytes <= kMaxSharedBlock ? round_up(std::max<size_t>(nbytes, 1), kSharedGrain) : 0;
    const auto at = reinterpret_cast<uintptr_t>(block);
    std::lock_guard<std::mutex> lock(mu_);
    const size_t c = size == 0 ? count() : chunk_of(at, size);
    if (c == count_.load(std::memory_order_relaxed)) {  // from a destructor: never throws
      FERRY_LOG(Warn, "arena", "the shared arena was given back a block it never handed out "
                "(internal error): ", nbytes, " B at ", block);
      return;
    }
    in_use_ -= size;
    // Kept whole in place of the block kept longest (which goes back to the free ranges).
    Kept* slot = &kept_[0];
    for (Kept& k : kept_) {
      if (k.size == 0) {
        slot = &k;
        break;
      }
      if (k.when < slot->when) slot = &k;
    }
    if (slot->size != 0) give_back(*slot);
    *slot = Kept{at, size, c, ++released_};
  }

  size_t release_free_pages() {
    std::lock_guard<std::mutex> lock(mu_);
    for (Kept& k : kept_)
      if (k.size != 0) give_back(k);
    size_t bytes = 0;
    free_.for_each([&](size_t c, size_t offset, size_t size) {
      // Offsets and sizes are whole pages (kSharedGrain). A file system without hole punching
      // keeps the pages: nothing lost but the memory.
      if (fallocate(chunks_[c].fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                    static_cast<off_t>(offset), static_cast<off_t>(size)) == 0)
        bytes += size;
    });
    return bytes;
  }

  size_t count() const { return count_.load(std::memory_order_acquire); }
  const SharedChunk& chunk(size_t i) const { return chunks_[i]; }
  size_t in_use() {
    std::lock_guard<std::mutex> lock(mu_);
    return in_use_;
  }
  // The chunk holding [at, at + bytes), or count() when none does. Lock-free: chunks are only
  // ever added.
  size_t chunk_of(uintptr_t at, size_t bytes) const {
    const size_t n = count();
    for (size_t i = 0; i < n; ++i) {
      const SharedChunk& c = chunks_[i];
      if (at >= c.address && at - c.address <= c.bytes && bytes <= c.bytes - (at - c.address))
        return i;
    }
    return n;
  }

 private:
  SharedArena() = default;

  // A new chunk that holds `size` bytes at least: a memory file, sized, mapped, its descriptor
  // kept. mu_ held.
  void grow(size_t size, const char* op) {
    const size_t n = count_.load(std::memory_order_relaxed);
    FERRY_CHECK(n < kMaxSharedChunks, Error, op, ": the shared arena already has ",
                kMaxSharedChunks, " chunks (", total_ >> 20, " MiB); cannot place ", size,
                " more bytes in shared memory");
    const size_t bytes = std::max({round_up(size, size_t{2} << 20), kMinSharedChunk, total_});
    char name[64];
    std::snprintf(name, sizeof name, "ferry-arena-%d-%zu", static_cast<int>(getpid()), n);
    const int fd = memfd_create(name, MFD_CLOEXEC);
    FERRY_CHECK(fd >= 0, Error, op, ": cannot make shared memory for tensors: memfd_create: ",
                std::strerror(errno));
    std::string why;
    struct stat st {};
    void* base = MAP_FAILED;
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0)
      why = str("ftruncate(", bytes, " B): ", std::strerror(errno));
    else if (fstat(fd, &st) != 0)
      why = str("fstat: ", std::strerror(errno));
    else if ((base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
             MAP_FAILED)
      why = str("mmap(", bytes, " B): ", std::strerror(errno));
    if (!why.empty()) {
      close(fd);
      FERRY_THROW(Error, op, ": cannot make shared memory for tensors: ", why);
    }
    chunks_[n] = SharedChunk{reinterpret_cast<uintptr_t>(base), bytes,
                             static_cast<uint64_t>(st.st_ino), fd, 0};
    total_ += bytes;
    free_.add_region(n, bytes);
    count_.store(n + 1, std::memory_order_release);
    FERRY_LOG(Info, "arena", "shared arena: chunk ", n, " of ", bytes >> 20, " MiB (", name,
              ", fd ", fd, ")");
  }

  // A freed block kept whole for the next request of its size (`size` 0: none), and when it
  // was freed (the count of releases then).
  struct Kept {
    uintptr_t address = 0;
    size_t size = 0;
    size_t chunk = 0;
    uint64_t when = 0;
  };
  static constexpr size_t kKeptBlocks = 16;

  // Returns a kept block to the free ranges. mu_ held.
  void give_back(Kept& k) {
    free_.give({k.chunk, k.address - chunks_[k.chunk].address}, k.size);
    k.size = 0;
  }

  std::mutex mu_;
  std::array<Kept, kKeptBlocks> kept_{};
  uint64_t released_ = 0;
  std::array<SharedChunk, kMaxSharedChunks> chunks_{};
  std::atomic<size_t> count_{0};
  size_t total_ = 0;   // bytes of every chunk
  size_t in_use_ = 0;  // bytes handed out
  FreeRanges free_;    // by chunk
};

}  // namespace

void* acquire_shared_block(size_t nbytes, const char* op) {
  return SharedArena::get().acquire(nbytes, op);
}

void release_shared_block(void* block, size_t nbytes) {
  SharedArena::get().release(block, nbytes);
}

size_t shared_chunk_count() { return SharedArena::get().count(); }

const SharedChunk& shared_chunk(size_t i) { return SharedArena::get().chunk(i); }

bool in_shared_arena(const void* p, size_t bytes) {
  SharedArena& a = SharedArena::get();
  return a.chunk_of(reinterpret_cast<uintptr_t>(p), bytes) < a.count();
}

size_t shared_bytes_in_use() { return SharedArena::get().in_use(); }

size_t release_free_shared_pages() { return SharedArena::get().release_free_pages(); }

}  // namespace ferry::detail
