#include <ferry/collectives/shm/peer_arenas.h>

#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ferry::detail::shm {
namespace {

std::atomic<uint64_t> g_mapped_bytes{0};
std::atomic<uint64_t> g_written_bytes{0};
std::atomic<uint64_t> g_kernel_bytes{0};
std::atomic<uint64_t> g_streamed_bytes{0};
std::atomic<uint64_t> g_in_slot_bytes{0};
std::atomic<uint64_t> g_kernel_written_bytes{0};

// Why a chunk could not be mapped, and whether that lasts: a descriptor this rank may not
// open (EACCES, EPERM), a process or descriptor gone (ENOENT), a memory file other than the
// one listed, or a mapping refused for its access; or only for now (out of descriptors or
// memory: EMFILE, ENFILE, ENOMEM), which a later op tries again.
struct Refusal {
  std::string why;  // empty: mapped
  bool lasting = false;
};

bool lasting(int err) { return err == EACCES || err == EPERM || err == ENOENT; }

// Maps `chunk` of process `pid`, read-only or also for writing: an empty refusal and `*base`,
// or why not.
Refusal map_chunk(int pid, const SharedChunk& chunk, bool writable, const unsigned char** base) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, static_cast<int>(chunk.fd));
  const int fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return {str("open(", path, "): ", std::strerror(err)), lasting(err)};
  }
  Refusal refused;
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    refused = {str("fstat(", path, "): ", std::strerror(errno)), false};
  } else if (static_cast<uint64_t>(st.st_ino) != chunk.inode ||
             static_cast<uint64_t>(st.st_size) != chunk.bytes) {
    refused = {str(path, " is not the chunk listed (inode ", st.st_ino, " of ", st.st_size,
                   " B, expected inode ", chunk.inode, " of ", chunk.bytes, " B)"),
               true};
  } else {
    void* p = mmap(nullptr, chunk.bytes, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED,
                   fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      refused = {str("mmap(", chunk.bytes, " B): ", std::strerror(err)), lasting(err)};
    } else {
      *base = static_cast<const unsigned char*>(p);
    }
  }
  close(fd);
  return refused;
}

}  // namespace

SingleCopyBytes single_copy_bytes() {
  return {g_mapped_bytes.load(std::memory_order_relaxed),
          g_written_bytes.load(std::memory_order_relaxed),
          g_kernel_bytes.load(std::memory_order_relaxed),
          g_streamed_bytes.load(std::memory_order_relaxed),
          g_in_slot_bytes.load(std::memory_order_relaxed),
          g_kernel_written_bytes.load(std::memory_order_relaxed)};
}

void count_single_copy(Way way, size_t bytes) {
  if (way == Way::KernelWritten) {  // counted in both
    g_kernel_written_bytes.fetch_add(bytes, std::memory_order_relaxed);
    way = Way::Kernel;
  }
  std::atomic<uint64_t>& counter = way == Way::Mapped    ? g_mapped_bytes
                                   : way == Way::Written ? g_written_bytes
                                   : way == Way::Kernel  ? g_kernel_bytes
                                   : way == Way::InSlot  ? g_in_slot_bytes
                                                         : g_streamed_bytes;
  counter.fetch_add(bytes, std::memory_order_relaxed);
}

PeerArenas::PeerArenas(int ranks) {
  for (std::vector<Chunks>& by_rank : maps_) by_rank.resize(static_cast<size_t>(ranks));
}

PeerArenas::~PeerArenas() { unmap_all(); }

PeerArenas::PeerArenas(PeerArenas&& other) noexcept
    : maps_(std::move(other.maps_)), published_(other.published_) {
  for (std::vector<Chunks>& by_rank : other.maps_) by_rank.clear();
}

PeerArenas& PeerArenas::operator=(PeerArenas&& other) noexcept {
  if (this != &other) {
    unmap_all();
    maps_ = std::move(other.maps_);
    published_ = other.published_;
    for (std::vector<Chunks>& by_rank : other.maps_) by_rank.clear();
  }
  return *this;
}

void PeerArenas::unmap_all() {
  for (std::vector<Chunks>& by_rank : maps_) {
    for (Chunks& rank : by_rank)
      for (Mapping& m : rank)
        if (m.base != nullptr) munmap(const_cast<unsigned char*>(m.base), m.bytes);
    by_rank.clear();
  }
}

void PeerArenas::publish(Slot& mine) {
  const auto made = static_cast<uint32_t>(shared_chunk_count());
  if (made == published_) return;
  for (uint32_t i = published_; i < made; ++i) mine.arenas[i] = shared_chunk(i);
  published_ = made;
  mine.arena_count.store(made, std::memory_order_release);
}

const unsigned char* PeerArenas::find_in(Access access, int r, const Slot& theirs, int pid,
                                         uint64_t address, size_t bytes,
                                         const std::string& describe) {
  // Bounded by the list's capacity whatever the peer wrote: its entries are only compared.
  const uint32_t listed = std::min<uint32_t>(theirs.arena_count.load(std::memory_order_acquire),
                                             static_cast<uint32_t>(kMaxSharedChunks));
  for (uint32_t i = 0; i < listed; ++i) {
    const SharedChunk& c = theirs.arenas[i];
    if (address < c.address || address - c.address > c.bytes ||
        bytes > c.bytes - (address - c.address))
      continue;
    Mapping& m = maps_[access][static_cast<size_t>(r)][i];
    if (!m.tried) {
      const Refusal refused = map_chunk(pid, c, access == kWrite, &m.base);
      if (refused.why.empty()) {
        m.tried = true;
        m.bytes = c.bytes;
      } else {
        // Only a lasting refusal is kept: out of descriptors or memory now, a later op tries
        // again. Logged once per chunk either way.
        m.tried = refused.lasting;
        if (!m.logged)
          FERRY_LOG(Info, "shm", describe, ": cannot map rank ", r, "'s shared chunk ", i,
                    access == kWrite ? " for writing (" : " (", refused.why, "): ",
                    access == kWrite ? "that rank reads this rank's part itself"
                                     : "its buffers there are read through the kernel",
                    refused.lasting ? "" : " until a later op maps it");
        m.logged = true;
      }
    }
    return m.base == nullptr ? nullptr : m.base + (address - c.address);
  }
  return nullptr;
}

}  // namespace ferry::detail::shm
