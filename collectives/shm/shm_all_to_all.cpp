// The all_to_all's single copy: each receiver reads its blocks straight out of its peers'
// send buffers with process_vm_readv (cross-memory attach), as MPICH does on one host. Only the
// block places go through the segment; the data moves once, from the sender's tensor into the
// receiver's, with no staging copy on either side.
#include <ferry/collectives/shm/shm_group.h>

#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <cerrno>
#include <cstring>

#include <sys/uio.h>

namespace ferry::detail::shm {
namespace {

// process_vm_readv moves at most this much per call (a partial read returns less anyway).
constexpr size_t kReadChunk = size_t{1} << 30;

// One read of `bytes` from `pid`'s `address`: 0, or the errno of the failure.
int cma_read(int pid, uint64_t address, void* to, size_t bytes) {
  auto* dst = static_cast<char*>(to);
  while (bytes > 0) {
    const size_t want = std::min(bytes, kReadChunk);
    iovec local{dst, want};
    iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(address)), want};
    const ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (got == 0) return EFAULT;
    dst += got;
    address += static_cast<uint64_t>(got);
    bytes -= static_cast<size_t>(got);
  }
  return 0;
}

}  // namespace

void GroupShm::probe_peers() {
  // Read each peer's header (its magic) through the peer's own mapping of the segment. EPERM
  // (Yama ptrace_scope, a container without CAP_SYS_PTRACE), ENOSYS (seccomp, an old kernel)
  // and the like make this rank answer "cannot"; every rank then takes the same other path, as
  // each waits for every rank's answer (peers_readable).
  bool mine = true;
  std::string why;
  for (int r = 0; r < size_ && mine; ++r) {
    if (r == rank_) continue;
    uint64_t magic = 0;
    const int err = cma_read(peers_.pid(r), slot(r)->segment_address, &magic, sizeof magic);
    if (err != 0 || magic != kMagic) {
      mine = false;
      why = err != 0 ? std::strerror(err) : "read the wrong bytes";
    }
  }
  if (!mine)
    FERRY_LOG(Info, "shm", describe_, ": cannot read peers' memory (", why,
              "): all_to_all takes the pairwise exchange");
  publish(slot(rank_)->cma, mine ? 1 : 2);
}

bool GroupShm::peers_readable(const OpRef& op) {
  if (readable_ >= 0) return readable_ == 1;
  auto answered = [&] {
    for (int r = 0; r < size_; ++r)
      if (slot(r)->cma.load(std::memory_order_acquire) == 0) return false;
    return true;
  };
  if (!answered() && !wait_for(answered, op.deadline, op)) fail_timeout(next_ + 1, op);
  bool all = true;
  for (int r = 0; r < size_; ++r) all = all && slot(r)->cma.load(std::memory_order_acquire) == 1;
  readable_ = all ? 1 : 0;
  return all;
}

uint32_t GroupShm::start_all_to_all(const OpRef& op, const Block* send, char* out,
                                    const uint64_t* recv_offsets) {
  const size_t places = static_cast<size_t>(size_) * sizeof(Block);
  FERRY_CHECK(places <= kSlotBytes, InvalidArgument, op.name, ": ", size_, " ranks' block places "
              "do not fit a shared-memory slot (at most ", kSlotBytes / sizeof(Block), " ranks)");
  const uint32_t n = begin(op);
  sign(n, op);
  std::memcpy(slot(rank_)->data[n % kDepth], send, places);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Pending& p = push(n, Kind::AllToAll);
    p.out = out;
    p.recv_offsets.assign(recv_offsets, recv_offsets + size_ + 1);
  }
  arrive(n);
  return n;
}

void GroupShm::copy_from(int r, uint64_t address, void* to, size_t bytes, const Pending& p) {
  if (bytes == 0) return;
  if (r == rank_)
    std::memcpy(to, reinterpret_cast<const void*>(static_cast<uintptr_t>(address)), bytes);
  else
    read_peer(r, address, to, bytes, p);
}

void GroupShm::read_peer(int r, uint64_t address, void* to, size_t bytes, const Pending& p) {
  const int err = cma_read(peers_.pid(r), address, to, bytes);
  if (err == 0) return;
  const char* op = p.kind == Kind::AllToAll ? "all_to_all_single" : "all_reduce";
  // A peer that failed on another rank's death lets go of its buffers, or exits: name the
  // rank that died, or the one that gave up, before the one whose memory went.
  const int32_t dead = header()->ended.load(std::memory_order_acquire);
  if (dead != 0)
    FERRY_THROW(PeerFailure, op, " (shm op ", p.n, ") on ", describe_, ": ", who(dead - 1),
                " ended while this rank read from its peers");
  const int32_t gave_up = header()->gave_up.load(std::memory_order_acquire);
  if (gave_up != 0 && gave_up - 1 != rank_)
    FERRY_THROW(PeerFailure, op, " (shm op ", p.n, ") on ", describe_, ": ", who(gave_up - 1),
                " gave up on the group while this rank read from its peers");
  if (err == ESRCH || peers_.first_ended() == r) {
    int32_t none = 0;
    header()->ended.compare_exchange_strong(none, r + 1);
    FERRY_THROW(PeerFailure, op, " (shm op ", p.n, ") on ", describe_, ": ", who(r),
                " ended while this rank read from it");
  }
  FERRY_THROW(TransportError, op, " (shm op ", p.n, ") on ", describe_, ": reading ", bytes,
              " B of ", who(r), "'s buffer failed: ", std::strerror(err));
}

void GroupShm::read_all_to_all(const Pending& p) {
  const uint32_t b = p.n % kDepth;
  auto* out = static_cast<char*>(p.out);
  // Starting after this rank: two ranks do not read the same peer at the same moment.
  for (int k = 0; k < size_; ++k) {
    const int r = (rank_ + k) % size_;
    const Block& from = reinterpret_cast<const Block*>(slot(r)->data[b])[rank_];
    const uint64_t expected = p.recv_offsets[r + 1] - p.recv_offsets[r];
    if (from.bytes != expected)
      FERRY_THROW(MismatchError, "all_to_all_single (shm op ", p.n, ") on ", describe_,
                  ": ", who(r), " sends ", from.bytes, " B to this rank, which expects ",
                  expected, " B from it (the ranks' split sizes disagree)");
    if (expected == 0) continue;
    if (r == rank_)
      std::memcpy(out + p.recv_offsets[r], reinterpret_cast<const void*>(from.address), expected);
    else
      read_peer(r, from.address, out + p.recv_offsets[r], expected, p);
  }
}

}  // namespace ferry::detail::shm
