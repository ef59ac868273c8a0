// The all_to_all's single copy: each receiver reads its blocks straight out of its peers'
// send buffers with process_vm_readv (cross-memory attach), as MPICH does on one host. Only the
// block places go through the segment; the data moves once, from the sender's tensor into the
// receiver's, with no staging copy on either side. A laid-out block (a matrix's columns, a
// permutation's segments) is read through both layouts at once: the call takes a list of
// pieces on each side.
#include <ferry/collectives/shm/shm_group.h>

#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <cerrno>
#include <cstring>

#include <sys/uio.h>

namespace ferry::detail::shm {
namespace {

// set_peers_unreadable_for_testing's switch.
std::atomic<bool> g_unreadable_for_testing{false};

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

// A layout's runs over `base`, an address in this process or a peer's.
struct Pieces {
  uint64_t base;
  const ByteRun* runs;
  size_t count;
};

// A scatter list for one process_vm_readv side: pieces that continue the last one extend it.
struct IoList {
  static constexpr size_t kMax = 1024;  // IOV_MAX on Linux
  iovec v[kMax];
  size_t n = 0;
  bool full() const { return n == kMax; }
  void add(uint64_t address, size_t bytes) {
    if (n > 0 && reinterpret_cast<uintptr_t>(v[n - 1].iov_base) + v[n - 1].iov_len == address) {
      v[n - 1].iov_len += bytes;
      return;
    }
    v[n++] = iovec{reinterpret_cast<void*>(static_cast<uintptr_t>(address)), bytes};
  }
};

// Reads the bytes of `remote` (in process `pid`) into `local`, in order, both holding as many
// bytes: a call per 1024 pieces of either side (or per kReadChunk). 0, or the errno of the
// failure (EFAULT for a short read, which only a failure makes).
int cma_read_pieces(int pid, const Pieces& local, const Pieces& remote) {
  IoList to, from;
  size_t batch = 0;
  auto flush = [&]() -> int {
    while (batch > 0) {
      const ssize_t got = process_vm_readv(pid, to.v, to.n, from.v, from.n, 0);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return errno;
      if (static_cast<size_t>(got) != batch) return EFAULT;
      batch = 0;
    }
    to.n = from.n = 0;
    return 0;
  };
  RunCursor<uint64_t> l(local.base, local.runs, local.count), r(remote.base, remote.runs,
                                                                  remote.count);
  while (!l.done() && !r.done()) {
    const size_t n = std::min(l.left_in_block(), r.left_in_block());
    to.add(l.at(), n);
    from.add(r.at(), n);
    l.advance(n);
    r.advance(n);
    batch += n;
    if (to.full() || from.full() || batch >= kReadChunk)
      if (const int err = flush()) return err;
  }
  return flush();
}

}  // namespace

void set_peers_unreadable_for_testing(bool on) {
  g_unreadable_for_testing.store(on, std::memory_order_relaxed);
}

void GroupShm::copy_own(const BlockRef& from, const BlockRef& to) {
  // A gather's own block in place (all_gather into its own block, broadcast's root).
  if (from.runs.count == 0 && to.runs.count == 0 && from.span == to.span) return;
  ByteRun from_whole{0, 1, from.bytes, 0}, to_whole{0, 1, to.bytes, 0};
  const ByteRunsRef f = from.runs.count > 0 ? from.runs : ByteRunsRef{from.span, &from_whole, 1};
  const ByteRunsRef t = to.runs.count > 0 ? to.runs : ByteRunsRef{to.span, &to_whole, 1};
  copy_runs(f, t);
}

void GroupShm::probe_peers() {
  // Read each peer's header (its magic) through the peer's own mapping of the segment. EPERM
  // (Yama ptrace_scope, a container without CAP_SYS_PTRACE), ENOSYS (seccomp, an old kernel)
  // and the like make this rank answer "cannot"; every rank then takes the same other path, as
  // each waits for every rank's answer (peers_readable).
  bool mine = !g_unreadable_for_testing.load(std::memory_order_relaxed);
  std::string why = mine ? "" : "refused for a test";
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

uint32_t GroupShm::start_all_to_all(const OpRef& op, const AllToAllBlocks& blocks,
                                    const char* name) {
  const size_t parts = blocks.parts();
  FERRY_CHECK(all_to_all_fits(parts, size_), InvalidArgument, op.name, ": ", parts,
              " part(s) among ", size_, " ranks have more block places than a shared-memory slot "
              "holds");
  const uint32_t n = begin(op);
  sign(n, op);
  publish_arenas();
  // This rank's blocks for part p and rank q at [p * W + q]: where they lie in this process;
  // then the bytes it expects from each, so that every rank can check every pair.
  const size_t w = static_cast<size_t>(size_);
  auto* places_out = reinterpret_cast<Block*>(slot(rank_)->data[n % kDepth]);
  auto* expects = reinterpret_cast<uint64_t*>(places_out + parts * w);
  for (size_t p = 0; p < parts; ++p) {
    for (int q = 0; q < size_; ++q) {
      const BlockRef to = blocks.recv(p, q);
      expects[p * w + static_cast<size_t>(q)] = to.runs.count == 0 ? to.bytes : bytes_of(to.runs);
      const BlockRef b = blocks.send(p, q);
      Block& out = places_out[p * w + static_cast<size_t>(q)];
      if (b.runs.count == 0) {
        out = Block{reinterpret_cast<uintptr_t>(b.span), b.bytes, 0, 0};
      } else {
        out = Block{reinterpret_cast<uintptr_t>(b.runs.base), bytes_of(b.runs),
                    reinterpret_cast<uintptr_t>(b.runs.runs), b.runs.count};
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    Pending& p = push(n, Kind::AllToAll);
    p.blocks = &blocks;
    p.name = name;
  }
  arrive(n);
  return n;
}

void GroupShm::copy_from(int r, uint64_t address, void* to, size_t bytes, const Pending& p) {
  if (bytes == 0) return;
  if (r == rank_) {
    std::memcpy(to, reinterpret_cast<const void*>(static_cast<uintptr_t>(address)), bytes);
  } else if (const unsigned char* from = mapped(r, address, bytes)) {
    std::memcpy(to, from, bytes);
    count_single_copy(Way::Mapped, bytes);
  } else {
    read_peer(r, address, to, bytes, p);
  }
}

const unsigned char* GroupShm::mapped(int r, uint64_t address, size_t bytes) {
  return arenas_.find(r, *slot(r), peers_.pid(r), address, bytes, describe_);
}

void GroupShm::read_peer(int r, uint64_t address, void* to, size_t bytes, const Pending& p) {
  const int err = cma_read(peers_.pid(r), address, to, bytes);
  if (err != 0) fail_read(r, err, bytes, p);
  count_single_copy(Way::Kernel, bytes);
}

void GroupShm::fail_read(int r, int err, size_t bytes, const Pending& p) {
  const char* op = name_of(p);
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

void GroupShm::check_block_sizes(const Pending& p) const {
  const uint32_t b = p.n % kDepth;
  const size_t parts = p.blocks->parts(), w = static_cast<size_t>(size_);
  for (int r = 0; r < size_; ++r) {
    const auto* sends = reinterpret_cast<const Block*>(slot(r)->data[b]);
    for (int q = 0; q < size_; ++q) {
      const auto* expects =
          reinterpret_cast<const uint64_t*>(reinterpret_cast<const Block*>(slot(q)->data[b]) +
                                            parts * w);
      for (size_t part = 0; part < parts; ++part) {
        const uint64_t sent = sends[part * w + static_cast<size_t>(q)].bytes;
        const uint64_t expected = expects[part * w + static_cast<size_t>(r)];
        if (sent != expected)
          FERRY_THROW(MismatchError, name_of(p), " (shm op ", p.n, ") on ", describe_,
                      ": ", who(r), " sends ", sent, " B", parts > 1 ? " of a part" : "", " to ",
                      who(q), ", which expects ", expected,
                      " B from it: the ranks' ", p.name ? "sizes" : "split sizes or layouts",
                      " do not match (found by "
                      "every rank before any data was read)");
      }
    }
  }
}

void GroupShm::read_all_to_all(const Pending& p) {
  const uint32_t b = p.n % kDepth;
  const size_t parts = p.blocks->parts();
  // Every pair's sizes, on every rank alike: all of them raise the same MismatchError.
  check_block_sizes(p);
  // Starting after this rank: two ranks do not read the same peer at the same moment.
  for (int k = 0; k < size_; ++k) {
    const int r = (rank_ + k) % size_;
    const auto* places = reinterpret_cast<const Block*>(slot(r)->data[b]);
    for (size_t part = 0; part < parts; ++part) {
      const Block& from = places[part * static_cast<size_t>(size_) + static_cast<size_t>(rank_)];
      const BlockRef to = p.blocks->recv(part, r);
      if (from.bytes == 0) continue;
      if (r == rank_)
        copy_own(p.blocks->send(part, r), to);
      else
        read_block(r, from, to, p);
    }
  }
}

bool GroupShm::copy_mapped(int r, const RemoteBlock& from, const BlockRef& to) {
  // The bytes the runs span in the peer ([lo, hi) from its base), which must lie in one mapped
  // chunk; runs that overflow or hold other than the block's bytes go through the kernel,
  // whose reads check every piece.
  uint64_t lo = UINT64_MAX, hi = 0, total = 0;
  for (size_t i = 0; i < from.count; ++i) {
    const ByteRun& run = from.runs[i];
    if (run.count == 0 || run.block == 0) continue;
    uint64_t last = 0, end = 0, bytes = 0;
    if (__builtin_mul_overflow(run.count - 1, run.stride, &last) ||
        __builtin_add_overflow(last, run.offset, &last) ||
        __builtin_add_overflow(last, run.block, &end) ||
        __builtin_mul_overflow(run.count, run.block, &bytes) ||
        __builtin_add_overflow(total, bytes, &total))
      return false;
    lo = std::min<uint64_t>(lo, run.offset);
    hi = std::max(hi, end);
  }
  if (total != from.bytes) return false;
  if (total == 0) return true;
  const unsigned char* at = mapped(r, from.base + lo, hi - lo);
  if (at == nullptr) return false;
  const ByteRunsRef source{const_cast<char*>(reinterpret_cast<const char*>(at)) - lo, from.runs,
                           from.count};
  ByteRun to_whole{0, 1, to.bytes, 0};
  copy_runs(source, to.runs.count > 0 ? to.runs : ByteRunsRef{to.span, &to_whole, 1});
  count_single_copy(Way::Mapped, total);
  return true;
}

void GroupShm::read_block(int r, const Block& from, const BlockRef& to, const Pending& p) {
  ByteRun from_whole{0, 1, from.bytes, 0};
  Pieces remote{from.address, &from_whole, 1};
  if (from.run_count > 0) {
    // The sender's runs, fetched from its process; they stay there until this rank said done.
    peer_runs_.resize(from.run_count);
    copy_from(r, from.runs, peer_runs_.data(), from.run_count * sizeof(ByteRun), p);
    remote = Pieces{from.address, peer_runs_.data(), peer_runs_.size()};
  }
  if (copy_mapped(r, RemoteBlock{remote.base, remote.runs, remote.count, from.bytes}, to)) return;
  ByteRun to_whole{0, 1, to.bytes, 0};
  const Pieces local = to.runs.count == 0
                           ? Pieces{reinterpret_cast<uintptr_t>(to.span), &to_whole, 1}
                           : Pieces{reinterpret_cast<uintptr_t>(to.runs.base), to.runs.runs,
                                    to.runs.count};
  const int err = cma_read_pieces(peers_.pid(r), local, remote);
  if (err != 0) fail_read(r, err, from.bytes, p);
  count_single_copy(Way::Kernel, from.bytes);
}

}  // namespace ferry::detail::shm
