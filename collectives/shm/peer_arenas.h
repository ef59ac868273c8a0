// A group's view of its peers' shared arenas (internal): where a peer's tensor lies in this
// process when the peer placed it in shared memory (runtime/shared_arena.h).
//
// Each rank lists its arena's chunks in its slot of the group's segment (shm_layout.h) before
// a large op arrives. A reader that meets a peer's buffer address looks it up in the peer's
// list: when a chunk holds the whole buffer, the reader maps that chunk once (read-only,
// through /proc/<pid>/fd, after checking the memory file's inode and size against the list)
// and copies or reduces straight out of the mapping, with no system call; otherwise, or when
// the chunk cannot be mapped (logged once per chunk), it reads through the kernel as before. A
// refusal that may pass (out of descriptors or memory) is tried again at the next op that
// meets the chunk; one that lasts (no permission, the process or memory file gone or another
// one) is kept for the group's life.
// A chunk holding a peer's output that the algorithm writes into (a gather's pushes) is mapped
// a second time, writable, only for that.
// The choice is the reader's, per peer and buffer, from what the peers published for the op:
// no rank waits for another to agree on it, and a group of some ranks with shared buffers
// and some without needs no extra round. Mappings last as long as the group's segment.
#pragma once

#include <ferry/collectives/shm/shm_layout.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ferry::detail::shm {

// Bytes the large shared-memory ops of this process moved between peers' buffers and its own
// so far, by way: through a mapped peer arena (read, or a block written into a peer's
// output), or through the kernel (process_vm_readv, or an all_to_all's process_vm_writev);
// and, apart, the bytes its large all_reduces wrote into their outputs with streaming stores
// (store_chooser.h), and what the all_to_all moved through slots. For tests and tools.
struct SingleCopyBytes {
  uint64_t mapped = 0;     // read from a peer's mapped arena
  uint64_t written = 0;    // written into a peer's mapped output
  uint64_t by_kernel = 0;  // read (or written) through the kernel
  uint64_t streamed = 0;   // written with streaming stores (this rank's output, or a peer's)
  // An all_to_all's small blocks copied out of a peer's slot (shm_all_to_all.cpp).
  uint64_t in_slot = 0;
  uint64_t written_by_kernel = 0;  // of by_kernel, the bytes written into a peer's memory
};
SingleCopyBytes single_copy_bytes();
enum class Way { Mapped, Written, Kernel, Streamed, InSlot, KernelWritten };
// Counts `bytes` moved `way`.
void count_single_copy(Way way, size_t bytes);

class PeerArenas {
 public:
  PeerArenas() = default;
  explicit PeerArenas(int ranks);
  ~PeerArenas();  // unmaps every peer chunk
  PeerArenas(PeerArenas&& other) noexcept;
  PeerArenas& operator=(PeerArenas&& other) noexcept;
  PeerArenas(const PeerArenas&) = delete;
  PeerArenas& operator=(const PeerArenas&) = delete;

  // Appends to `mine` (this rank's slot) the process's chunks made since the last call. On
  // the thread that starts ops (they are serialized by the group), before the op arrives.
  void publish(Slot& mine);

  // Where [address, address + bytes) of rank r's process lies in this one, mapped read-only,
  // or null (read it through the kernel). `theirs`: r's slot; `pid`: its process;
  // `describe`: the group, for the log. Under the group's lock.
  const unsigned char* find(int r, const Slot& theirs, int pid, uint64_t address, size_t bytes,
                            const std::string& describe) {
    return find_in(kRead, r, theirs, pid, address, bytes, describe);
  }
  // The same, mapped for writing (a peer's output that this rank writes its part into), or
  // null (the peer reads that part itself).
  unsigned char* find_writable(int r, const Slot& theirs, int pid, uint64_t address,
                               size_t bytes, const std::string& describe) {
    return const_cast<unsigned char*>(find_in(kWrite, r, theirs, pid, address, bytes, describe));
  }

 private:
  enum Access { kRead = 0, kWrite = 1 };
  struct Mapping {
    const unsigned char* base = nullptr;  // null: not mapped (yet, or ever when `tried`)
    size_t bytes = 0;
    bool tried = false;   // mapped, or refused for good: not tried again
    bool logged = false;  // a refusal was logged
  };
  using Chunks = std::array<Mapping, kMaxSharedChunks>;
  const unsigned char* find_in(Access access, int r, const Slot& theirs, int pid,
                               uint64_t address, size_t bytes, const std::string& describe);
  void unmap_all();

  std::array<std::vector<Chunks>, 2> maps_;  // by access, by group rank, by entry of its list
  uint32_t published_ = 0;                   // entries of this rank's own list
};

}  // namespace ferry::detail::shm
