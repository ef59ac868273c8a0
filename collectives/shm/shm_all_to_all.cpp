// The all_to_all's single copy: each block moves once, from the sender's tensor into the
// receiver's, through both layouts at once (a laid-out block, a matrix's columns or a
// permutation's segments, is a list of pieces on each side). Only the block places go through
// the segment. A receive block that lies in the receiver's shared arena is written by its
// sender (the receiver accepts it, and publishes its layout in its slot); any other is read by
// its receiver straight out of the sender's buffer, by mapping where it lies in shared memory,
// else with process_vm_readv (as MPICH does on one host). Blocks for peers that all fit the
// sender's slot travel in it instead (start_all_to_all says why).
#include <ferry/collectives/shm/shm_group.h>

#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <cerrno>
#include <cstring>

#include <sys/prctl.h>
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

// Copies the bytes of `remote` (in process `pid`) into `local`, or with `write` those of
// `local` into `remote`, in order, both holding as many bytes: a call per 1024 pieces of either
// side (or per kReadChunk). 0, or the errno of the failure (EFAULT for a short copy, which only
// a failure makes).
int cma_copy_pieces(int pid, const Pieces& local, const Pieces& remote, bool write = false) {
  IoList to, from;
  size_t batch = 0;
  auto flush = [&]() -> int {
    while (batch > 0) {
      const ssize_t got = write ? process_vm_writev(pid, to.v, to.n, from.v, from.n, 0)
                                : process_vm_readv(pid, to.v, to.n, from.v, from.n, 0);
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

// The bytes `count` runs span from their base, [lo, hi), and the bytes they hold; false when
// a run's end or the total overflows (a peer's runs are read from its memory, unchecked).
bool extent_of(const ByteRun* runs, size_t count, uint64_t& lo, uint64_t& hi, uint64_t& total) {
  lo = UINT64_MAX, hi = 0, total = 0;
  for (size_t i = 0; i < count; ++i) {
    const ByteRun& run = runs[i];
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
  return true;
}

size_t bytes_in(const BlockRef& b) { return b.runs.count == 0 ? b.bytes : bytes_of(b.runs); }

// An all_to_all of `parts` parts among `w` ranks in a slot's op buffer `data`: the send places,
// then the receive places, then the runs of the accepted receive blocks (at most
// accepted_runs_room(parts, w)), then the blocks that travel in the slot.
const RecvPlace* recv_places(const unsigned char* data, size_t parts, size_t w) {
  return reinterpret_cast<const RecvPlace*>(reinterpret_cast<const Block*>(data) + parts * w);
}
const ByteRun* accepted_runs(const unsigned char* data, size_t parts, size_t w) {
  return reinterpret_cast<const ByteRun*>(recv_places(data, parts, w) + parts * w);
}
size_t accepted_runs_room(size_t parts, size_t w) {
  return (kSlotBytes - parts * w * (sizeof(Block) + sizeof(RecvPlace))) / sizeof(ByteRun);
}

// Whether all of block `b` lies in this process's shared arena (a peer can map it).
bool in_arena(const BlockRef& b) {
  if (b.runs.count == 0) return b.bytes == 0 || in_shared_arena(b.span, b.bytes);
  uint64_t lo = 0, hi = 0, total = 0;
  if (!extent_of(b.runs.runs, b.runs.count, lo, hi, total)) return false;
  return total == 0 || in_shared_arena(b.runs.base + lo, hi - lo);
}

// Whether a block its sender published as `sent` is written by the sender into its receiver,
// which published `to` for it (else the receiver reads it): plain to both ranks.
bool written_by_sender(const Block& sent, const RecvPlace& to) {
  return sent.bytes > 0 && sent.run_count != kInSlot && to.accepts == 1;
}

// Copies the bytes of `from` into `to` (as many), piece by piece, with streaming stores; the
// caller fences them (stream_fence) before it tells anyone they are there.
void stream_runs(const ByteRunsRef& from, const ByteRunsRef& to) {
  RunCursor<uintptr_t> f(reinterpret_cast<uintptr_t>(from.base), from.runs, from.count);
  RunCursor<uintptr_t> t(reinterpret_cast<uintptr_t>(to.base), to.runs, to.count);
  while (!f.done() && !t.done()) {
    const size_t n = std::min(f.left_in_block(), t.left_in_block());
    stream_copy_unfenced(reinterpret_cast<void*>(t.at()), reinterpret_cast<const void*>(f.at()),
                         n);
    f.advance(n);
    t.advance(n);
  }
}

// Block `b`'s bytes (`bytes` of them), one after the other at `to`.
void pack_block(const BlockRef& b, uint64_t bytes, char* to) {
  if (b.runs.count > 0) {
    pack_runs(b.runs, to);
  } else if (bytes > 0) {
    std::memcpy(to, b.span, bytes);
  }
}

}  // namespace

// Where the kernel's Yama module restricts ptrace to a process's descendants (ptrace_scope 1,
// Ubuntu's default), it refuses this process's peers (its siblings under mpiexec) the reads of
// its memory that the single copy makes (process_vm_readv), and the large ops then go through
// the slots a piece at a time (1.2-2.8x the time at 1-64 MiB, 2 ranks). PR_SET_PTRACER_ANY
// lifts that for this process, as Open MPI does for its single copy: asked once per process,
// when this rank maps its first segment (so before any peer probes it), unless
// FERRY_SHM_PEER_READS=0. Without Yama the call fails with EINVAL and nothing changes; a
// stricter scope (2, 3) or a container that forbids ptrace is not lifted by it.
void allow_peer_reads() {
  static const bool asked = [] {
    if (!config().shm_peer_reads) return false;
    if (prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) == 0) {
      FERRY_LOG(Info, "shm", "Yama restricts ptrace on this host: any process of this user may "
                "now read this one's memory (prctl PR_SET_PTRACER_ANY; FERRY_SHM_PEER_READS=0 "
                "leaves the host's policy alone)");
    } else if (errno != EINVAL) {
      FERRY_LOG(Info, "shm", "prctl(PR_SET_PTRACER_ANY) failed: ", std::strerror(errno));
    }
    return true;
  }();
  (void)asked;
}

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
              "): all-to-alls take the pairwise exchange, the large ops go through the shared "
              "segment a piece at a time (where Yama's ptrace_scope is 1, FERRY_SHM_PEER_READS=1 "
              "lifts it; a container may need CAP_SYS_PTRACE)");
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
                                    const char* name, bool* accepted) {
  const size_t parts = blocks.parts();
  FERRY_CHECK(all_to_all_fits(parts, size_), InvalidArgument, op.name, ": ", parts,
              " part(s) among ", size_, " ranks have more block places than a shared-memory slot "
              "holds");
  const uint32_t n = begin(op);
  // This rank's blocks for part p and rank q at [p * W + q]: where they lie in this process;
  // then where it receives each, so that every rank can check every pair; then the layouts of
  // the receive blocks it lets its peers write.
  const size_t w = static_cast<size_t>(size_);
  unsigned char* data = slot(rank_)->data[n % kDepth];
  auto* places_out = reinterpret_cast<Block*>(data);
  auto* places_in = const_cast<RecvPlace*>(recv_places(data, parts, w));
  auto* runs_out = const_cast<ByteRun*>(accepted_runs(data, parts, w));
  auto to_line = [](size_t bytes) { return (bytes + kLine - 1) & ~(kLine - 1); };
  // A receive block in this rank's shared arena is written by its sender, which reads its own
  // block where it lies: one copy, where reading it would need a copy into shared memory first
  // (or the kernel's read, which pays per piece of a scattered block on either side, and per
  // page). Only an op whose Work keeps its buffers if it fails accepts (`accepted`): a peer
  // that has not noticed the failure may still write.
  size_t runs_used = 0;
  bool any_accepted = false;
  const size_t runs_room = accepted_runs_room(parts, w);
  for (size_t p = 0; p < parts; ++p) {
    for (int q = 0; q < size_; ++q) {
      const BlockRef to = blocks.recv(p, q);
      RecvPlace& place = places_in[p * w + static_cast<size_t>(q)];
      place = RecvPlace{bytes_in(to), 0, 0, 0, 0, 0};
      if (accepted == nullptr || q == rank_ || place.bytes == 0 || !in_arena(to) ||
          to.runs.count > runs_room - runs_used)
        continue;
      place.accepts = 1;
      if (to.runs.count == 0) {
        place.address = reinterpret_cast<uintptr_t>(to.span);
      } else {
        place.address = reinterpret_cast<uintptr_t>(to.runs.base);
        place.runs_at = static_cast<uint32_t>(runs_used);
        place.run_count = static_cast<uint32_t>(to.runs.count);
        std::memcpy(runs_out + runs_used, to.runs.runs, to.runs.count * sizeof(ByteRun));
        runs_used += to.runs.count;
      }
      any_accepted = true;
    }
  }
  if (accepted != nullptr) *accepted = any_accepted;
  // When every block for a peer fits the room left after those, the blocks go into the slot
  // too (each at a line's start): the peers copy them from there, nobody reads this rank's
  // buffers, and the op completes without waiting for its peers to say they read them. A
  // small all-to-all then costs two copies of its bytes and one hand-off, not a read of each
  // peer's memory and a second hand-off. Each rank decides for its own blocks; a reader takes
  // every block from where its sender published it.
  const size_t first_free =
      to_line(reinterpret_cast<unsigned char*>(runs_out + runs_used) - data);
  size_t in_slot = first_free;
  for (size_t p = 0; p < parts && in_slot <= kSlotBytes; ++p) {
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      const BlockRef b = blocks.send(p, q);
      in_slot += to_line(bytes_in(b));
    }
  }
  const bool sends_in_slot = in_slot <= kSlotBytes;
  size_t at = first_free;
  for (size_t p = 0; p < parts; ++p) {
    for (int q = 0; q < size_; ++q) {
      const BlockRef b = blocks.send(p, q);
      const uint64_t bytes = bytes_in(b);
      Block& out = places_out[p * w + static_cast<size_t>(q)];
      if (sends_in_slot && q != rank_) {
        pack_block(b, bytes, reinterpret_cast<char*>(data + at));
        out = Block{at, bytes, 0, kInSlot};
        at += to_line(bytes);
      } else if (b.runs.count == 0) {
        out = Block{reinterpret_cast<uintptr_t>(b.span), bytes, 0, 0};
      } else {
        out = Block{reinterpret_cast<uintptr_t>(b.runs.base), bytes,
                    reinterpret_cast<uintptr_t>(b.runs.runs), b.runs.count};
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    Pending& p = push(n, Kind::AllToAll, op.issued);
    p.blocks = &blocks;
    p.name = name;
    p.sends_in_slot = sends_in_slot;
    p.accepts = any_accepted;
  }
  publish_arenas();  // the peers map the receive blocks they write, which may lie in new chunks
  sign(n, op);
  arrive(n, op.issued);
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
  if (err != 0) fail_access(r, err, bytes, p);
  count_single_copy(Way::Kernel, bytes);
}

void GroupShm::write_peer(int r, uint64_t address, const void* from, size_t bytes,
                          const Pending& p) {
  const ByteRun whole{0, 1, bytes, 0};
  const Pieces local{reinterpret_cast<uintptr_t>(from), &whole, 1};
  const int err = cma_copy_pieces(peers_.pid(r), local, Pieces{address, &whole, 1},
                                  /*write=*/true);
  if (err != 0) fail_access(r, err, bytes, p, /*writing=*/true);
  count_single_copy(Way::KernelWritten, bytes);
}

void GroupShm::fail_access(int r, int err, size_t bytes, const Pending& p, bool writing) {
  const char* op = name_of(p);
  const char* moved = writing ? "wrote into" : "read from";
  // A peer that failed on another rank's death lets go of its buffers, or exits: name the
  // rank that died, or the one that gave up, before the one whose memory went.
  const int32_t dead = header()->ended.load(std::memory_order_acquire);
  if (dead != 0)
    FERRY_THROW(PeerFailure, op, " (shm op ", p.n, ") on ", describe_, ": ", who(dead - 1),
                " ended while this rank ", moved, " its peers");
  const int32_t gave_up = header()->gave_up.load(std::memory_order_acquire);
  if (gave_up != 0 && gave_up - 1 != rank_)
    FERRY_THROW(PeerFailure, op, " (shm op ", p.n, ") on ", describe_, ": ", who(gave_up - 1),
                " gave up on the group while this rank ", moved, " its peers");
  if (err == ESRCH || peers_.first_ended() == r) {
    int32_t none = 0;
    header()->ended.compare_exchange_strong(none, r + 1);
    FERRY_THROW(PeerFailure, op, " (shm op ", p.n, ") on ", describe_, ": ", who(r),
                " ended while this rank ", moved, " it");
  }
  FERRY_THROW(TransportError, op, " (shm op ", p.n, ") on ", describe_, ": ",
              writing ? "writing " : "reading ", bytes, " B of ", who(r),
              "'s buffer failed: ", std::strerror(err));
}

void GroupShm::check_block_sizes(const Pending& p) const {
  const uint32_t b = p.n % kDepth;
  const size_t parts = p.blocks->parts(), w = static_cast<size_t>(size_);
  for (int r = 0; r < size_; ++r) {
    const auto* sends = reinterpret_cast<const Block*>(slot(r)->data[b]);
    for (int q = 0; q < size_; ++q) {
      const RecvPlace* expects = recv_places(slot(q)->data[b], parts, w);
      for (size_t part = 0; part < parts; ++part) {
        const uint64_t sent = sends[part * w + static_cast<size_t>(q)].bytes;
        const uint64_t expected = expects[part * w + static_cast<size_t>(r)].bytes;
        if (sent != expected)
          FERRY_THROW(MismatchError, name_of(p), " (shm op ", p.n, ") on ", describe_,
                      ": ", who(r), " sends ", sent, " B", parts > 1 ? " of a part" : "", " to ",
                      who(q), ", which expects ", expected,
                      " B from it: the ranks' ", p.name ? "sizes" : "split sizes or layouts",
                      " do not match (found by "
                      "every rank before any data moved)");
      }
    }
  }
}

void GroupShm::read_all_to_all(const Pending& p) {
  const uint32_t b = p.n % kDepth;
  const size_t parts = p.blocks->parts(), w = static_cast<size_t>(size_);
  const size_t me = static_cast<size_t>(rank_);
  // Every pair's sizes, on every rank alike: all of them raise the same MismatchError.
  check_block_sizes(p);
  const auto* mine = reinterpret_cast<const Block*>(slot(rank_)->data[b]);
  const RecvPlace* accepted_here = recv_places(slot(rank_)->data[b], parts, w);
  // The blocks this rank writes into its peers' outputs, with ordinary or streaming stores:
  // whichever wrote the op's size faster lately (store_chooser.h; a peer reads those lines
  // next, and on some placements of the cores an ordinary store into a line the peer read
  // last takes many times a streaming one, on others the streaming ones are the slower).
  uint64_t push_bytes = 0;
  for (int r = 0; r < size_; ++r) {
    const RecvPlace* theirs = recv_places(slot(r)->data[b], parts, w);
    for (size_t part = 0; part < parts && r != rank_; ++part) {
      const Block& sent = mine[part * w + static_cast<size_t>(r)];
      if (written_by_sender(sent, theirs[part * w + me])) push_bytes += sent.bytes;
    }
  }
  const bool streaming = push_bytes > 0 && push_stores_.of(push_bytes, false).next_streaming();
  uint64_t push_ns = 0;
  // Starting after this rank: two ranks do not read or write the same peer at the same moment.
  for (int k = 0; k < size_; ++k) {
    const int r = (rank_ + k) % size_;
    const size_t peer = static_cast<size_t>(r);
    const auto* places = reinterpret_cast<const Block*>(slot(r)->data[b]);
    const RecvPlace* theirs = recv_places(slot(r)->data[b], parts, w);
    for (size_t part = 0; part < parts; ++part) {
      const Block& from = places[part * w + me];
      const BlockRef to = p.blocks->recv(part, r);
      if (r == rank_) {
        if (from.bytes > 0) copy_own(p.blocks->send(part, r), to);
        continue;
      }
      // Its sender writes a block where its receiver accepts it and it did not travel in the
      // sender's slot; else its receiver reads it.
      const Block& sent = mine[part * w + peer];
      if (written_by_sender(sent, theirs[part * w + me])) {
        const uint64_t start = now_ns();
        write_block(r, theirs[part * w + me], p.blocks->send(part, r), p, streaming);
        push_ns += now_ns() - start;
      }
      if (from.bytes > 0 && !written_by_sender(from, accepted_here[part * w + peer]))
        read_block(r, from, to, p);
    }
  }
  if (streaming) stream_fence();
  if (push_bytes > 0) push_stores_.of(push_bytes, false).record(streaming, push_ns, push_bytes);
}

void GroupShm::write_block(int r, const RecvPlace& to, const BlockRef& from, const Pending& p,
                           bool streaming) {
  // The receiver's layout, copied into its slot; its runs, read from its slot, are checked
  // as a sender's are (copy_mapped), and must hold the bytes this rank sends.
  const size_t w = static_cast<size_t>(size_), parts = p.blocks->parts();
  ByteRun whole{0, 1, to.bytes, 0};
  const ByteRun* runs = &whole;
  size_t count = 1;
  if (to.run_count > 0) {
    const ByteRun* listed = accepted_runs(slot(r)->data[p.n % kDepth], parts, w);
    const size_t room = accepted_runs_room(parts, w);
    FERRY_CHECK(to.runs_at <= room && to.run_count <= room - to.runs_at, TransportError,
                name_of(p), " (shm op ", p.n, ") on ", describe_, ": ", who(r),
                " published a receive layout of ", to.run_count, " runs at ", to.runs_at,
                " that its slot cannot hold (internal error)");
    runs = listed + to.runs_at;
    count = to.run_count;
  }
  uint64_t lo = 0, hi = 0, total = 0;
  FERRY_CHECK(extent_of(runs, count, lo, hi, total) && total == to.bytes, TransportError,
              name_of(p), " (shm op ", p.n, ") on ", describe_, ": ", who(r),
              " published a receive layout that does not hold the ", to.bytes,
              " B it expects (internal error)");
  if (total == 0) return;
  ByteRun from_whole{0, 1, from.bytes, 0};
  const ByteRunsRef source =
      from.runs.count > 0 ? from.runs : ByteRunsRef{from.span, &from_whole, 1};
  if (unsigned char* at =
          arenas_.find_writable(r, *slot(r), peers_.pid(r), to.address + lo, hi - lo, describe_)) {
    const ByteRunsRef dest{reinterpret_cast<char*>(at) - lo, runs, count};
    if (streaming) {
      stream_runs(source, dest);
    } else {
      copy_runs(source, dest);
    }
    count_single_copy(Way::Written, total);
    return;
  }
  const Pieces local{reinterpret_cast<uintptr_t>(source.base), source.runs, source.count};
  const int err = cma_copy_pieces(peers_.pid(r), local, Pieces{to.address, runs, count},
                                  /*write=*/true);
  if (err != 0) fail_access(r, err, total, p, /*writing=*/true);
  count_single_copy(Way::KernelWritten, total);
}

bool GroupShm::copy_mapped(int r, const RemoteBlock& from, const BlockRef& to) {
  // The bytes the runs span in the peer ([lo, hi) from its base), which must lie in one mapped
  // chunk; runs that overflow or hold other than the block's bytes go through the kernel,
  // whose reads check every piece.
  uint64_t lo = 0, hi = 0, total = 0;
  if (!extent_of(from.runs, from.count, lo, hi, total) || total != from.bytes) return false;
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
  if (from.run_count == kInSlot) {
    // Published in the sender's slot, which the sender filled within its bounds.
    FERRY_CHECK(from.address <= kSlotBytes && from.bytes <= kSlotBytes - from.address,
                TransportError, name_of(p), " (shm op ", p.n, ") on ", describe_, ": ", who(r),
                " published a block of ", from.bytes, " B at ", from.address,
                " of its slot, which holds ", kSlotBytes, " B (internal error)");
    const char* at = reinterpret_cast<const char*>(slot(r)->data[p.n % kDepth]) + from.address;
    if (to.runs.count == 0) {
      std::memcpy(to.span, at, from.bytes);
    } else {
      unpack_runs(at, to.runs);
    }
    count_single_copy(Way::InSlot, from.bytes);
    return;
  }
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
  const int err = cma_copy_pieces(peers_.pid(r), local, remote);
  if (err != 0) fail_access(r, err, from.bytes, p);
  count_single_copy(Way::Kernel, from.bytes);
}

}  // namespace ferry::detail::shm
