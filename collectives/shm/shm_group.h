// A group's shared-memory state and the life of its shared-memory ops (internal).
//
// One per group whose ranks share a host, made with the group (shm_ops.h's prepare_group: then
// no op waits at issue for a peer to take part in the segment's exchange; a group of one rank
// makes it at its first shared-memory op instead). It maps the segment (shared_segment.h; layout in
// shm_layout.h), numbers the group's shared-memory ops, and keeps this rank's started ops in
// order until they completed.
//
// An op starts on the thread that issues it (under the group's issue lock, or on the group's
// worker for a queued op): it publishes its part and returns its number. It completes in two
// steps, in op order, run by whichever thread tests or waits for it or for any later op of the
// group (so two ops left unwaited never block each other, nor a third that needs their
// buffers): once every rank published, this rank reads what it needs (sums the payloads, or
// copies its blocks out of its peers' memory) and says it is done; an all_to_all then also
// waits until every peer said so, as they read from its buffer. A rank whose ops fail marks
// the segment before its caller gets its buffers back, and a rank that read peers' buffers
// checks that mark before it says done (a peer's caller may have changed them meanwhile). A wait spins briefly, then
// sleeps on the segment's futex (shm_wait.h), and between sleeps checks its deadline, its
// peers' processes, a peer that gave up, and the group's poison.
#pragma once

#include <ferry/collectives/collectives.h>
#include <ferry/collectives/engine/fingerprint.h>
#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/engine/issue.h>
#include <ferry/collectives/engine/op_context.h>
#include <ferry/collectives/shm/all_to_all_blocks.h>
#include <ferry/collectives/shm/gather_blocks.h>
#include <ferry/collectives/shm/peer_arenas.h>
#include <ferry/collectives/shm/shared_segment.h>
#include <ferry/collectives/shm/shm_layout.h>
#include <ferry/collectives/shm/shm_wait.h>
#include <ferry/collectives/shm/store_chooser.h>
#include <ferry/runtime/dtype.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <vector>

namespace ferry::detail::shm {

// The op a start or wait belongs to: its name and sequence number for messages, when its wait
// gives up, and its call (OpContext's fingerprint), which every rank compares.
struct OpRef {
  const char* name;
  uint64_t seq;
  Clock::time_point deadline;
  const Fingerprint* fingerprint;
  uint32_t check;  // check_hash(*fingerprint)
  // The op's context, asked between a slow wait's slices whether a peer entered finalize
  // without issuing the op (OpContext::departed_peer); null while the group is being made.
  const OpContext* ctx = nullptr;
  // When the op was issued (the clock read that its deadline came from): the progress thread's
  // first look is timed from it, so that starting an op reads the clock once.
  Clock::time_point issued{};
};

// Lets any process of this user read this one's memory where Yama's ptrace_scope 1 would
// refuse its peers the single copy's reads (unless FERRY_SHM_PEER_READS=0); once per process,
// before this rank confirms its first segment (shm_all_to_all.cpp says why).
void allow_peer_reads();
// For tests: a group made while this is on (its segment's probe) answers that its ranks cannot
// read each other's memory, as where Yama or a container forbids it, so that the fallbacks run
// on a host that allows the reads. Every rank must set it alike around making the group.
void set_peers_unreadable_for_testing(bool on);
// For tests: while set (null: unset), `pause(op)` runs before the reads of peers' buffers
// that complete a large op (an all_to_all's, a large gather's or all_reduce's second half, a
// reduce_scatter's), on whichever thread advances it, so that a test can hold one rank there
// while a peer fails.
void set_pause_before_reads_for_testing(void (*pause)(const char* op));

class GroupShm : public std::enable_shared_from_this<GroupShm> {
 public:
  // The group's state, made on first use (collective: see the top). Throws as
  // SharedSegment::map_for_group does.
  static std::shared_ptr<GroupShm> of(GroupImpl& g, const OpRef& op);
  ~GroupShm();

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Starts a barrier; returns its op number.
  uint32_t start_barrier(const OpRef& op);
  // Starts an all_reduce of `count` elements of `dtype` (at most kSlotBytes): `in` is copied
  // into the segment now; `out` (which may be `in`) receives the reduction, summed in rank
  // order on every rank (the direct exchange's order: the same bits everywhere). A null `out`
  // receives nothing (a reduce's ranks other than the root).
  // With `block` (a reduce_scatter through the slots) only elements [first, first + block) of
  // the reduction land in `out`, which holds element `first` at its start.
  static constexpr size_t kWhole = SIZE_MAX;
  uint32_t start_all_reduce(const OpRef& op, const void* in, void* out, size_t count, DType dtype,
                            ReduceOp reduce, size_t first = 0, size_t block = kWhole) {
    const InputPiece whole{in, count * dtype_size(dtype)};
    return start_all_reduce(op, std::span<const InputPiece>(&whole, 1), out, count, dtype, reduce,
                            first, block);
  }
  // The same with the input in pieces (reduce_scatter's list form), copied into the segment
  // one after the other: their bytes add up to count elements.
  uint32_t start_all_reduce(const OpRef& op, std::span<const InputPiece> in, void* out,
                            size_t count, DType dtype, ReduceOp reduce, size_t first,
                            size_t block);
  // Reads each peer's segment header through its process (process_vm_readv) and publishes
  // whether that worked; made once, with the segment, without waiting for anyone.
  void probe_peers();
  // Whether every rank can read its peers' memory (process_vm_readv): the all_to_all's
  // single-copy path. The same answer on every rank (each publishes its probe's result; this
  // waits for all of them). Throws as a wait does.
  bool peers_readable(const OpRef& op);
  // Whether an all_to_all of `parts` parts among `ranks` ranks fits a slot: per part and rank,
  // a block's place and where the block from that rank goes.
  static constexpr bool all_to_all_fits(size_t parts, int ranks) {
    return parts * static_cast<size_t>(ranks) * (sizeof(Block) + sizeof(RecvPlace)) <=
           kSlotBytes;
  }
  // Starts an all_to_all by reading peers' memory (peers_readable() said yes): this rank's
  // block of each part for rank q is blocks.send(part, q); it receives rank p's into
  // blocks.recv(part, p). `blocks` (and the runs it lists) must stay until the op completed.
  // `name`: the collective the messages name (null: all_to_all_single). With `accepted`, the
  // peers may write their blocks into this rank's receive blocks that lie in its shared arena
  // (`*accepted` says whether any did: the op's Work must then keep its buffers for the life
  // of the process if it fails); without, every block is read by this rank.
  uint32_t start_all_to_all(const OpRef& op, const AllToAllBlocks& blocks,
                            const char* name = nullptr, bool* accepted = nullptr);

  // The bytes of a gather's block that one slot carries (after the piece's place).
  static constexpr size_t kGatherPiece = kSlotBytes - 3 * sizeof(uint64_t);
  // Starts one piece of a gather through the slots (shm_gather.cpp): bytes [at, at +
  // kGatherPiece) of this rank's block are copied into the segment now; every rank's piece
  // lands at its place in `blocks.out()`. A block of at most kGatherPiece is one piece at 0.
  uint32_t start_gather(const OpRef& op, const GatherBlocks& blocks, size_t at);

  // Whether a large gather's block places for `ranks` ranks fit a slot.
  static bool large_gather_fits(int ranks);
  // Starts a gather whose largest block is above kGatherPiece by single copy (peers_readable()
  // said yes; shm_gather_large.cpp): this rank's block is copied into every peer's output that
  // lies in shared memory and accepts it, the others read it themselves; every rank's block
  // lands at its place in `blocks.out()`. `accept_writes`: peers may write into this rank's
  // output (only where a failed op keeps the output for the life of the process). `blocks`
  // must stay until the op completed. Takes two op numbers; returns the later one.
  uint32_t start_large_gather(const OpRef& op, const GatherBlocks& blocks, bool accept_writes);

  // Starts an all_reduce larger than the slots by reading peers' memory (peers_readable() said
  // yes): this rank reduces slice `rank` of every rank's `in` (read straight from the peers'
  // buffers, in rank order, so the bits are the direct exchange's) into its `out`, then copies
  // every other slice, finished, out of its peers' `out`. Both stay the caller's only once the op
  // completed: its peers read them. Takes two op numbers; returns the later one. Without
  // `gather_here` this rank reads no slice in the second half (a reduce's ranks other than the
  // root: their `out` only holds their own slice, for the root to read).
  // With `accept_writes` (only where a failed op keeps `out` for the life of the process),
  // peers write their finished slices into `out` instead of this rank reading them: by mapping
  // where it lies in shared memory, else through the kernel.
  uint32_t start_large_all_reduce(const OpRef& op, const void* in, void* out, size_t count,
                                  DType dtype, ReduceOp reduce, bool gather_here = true,
                                  bool accept_writes = false);

  // Starts a reduce_scatter by reading peers' memory (peers_readable() said yes;
  // shm_all_reduce_large.cpp):
  // this rank reduces elements [first, first + count) of every rank's `in` (read straight from
  // the peers' buffers, in rank order) into its `out`, which may be that block of its own `in`.
  // `in` stays the caller's only once the op completed: its peers read it.
  // With `blocks` (reduce_scatter's list form; `in` unused) the input is W pieces lying
  // anywhere, rank r's block being blocks[r], read where it lies: each rank publishes where
  // each of its blocks is, and a peer that published one buffer is read as before, so the two
  // forms meet. At most max_listed_blocks() of them.
  uint32_t start_reduce_scatter(const OpRef& op, const void* in, void* out, size_t first,
                                size_t count, DType dtype, ReduceOp reduce,
                                std::span<const InputPiece> blocks = {});
  static size_t max_listed_blocks();

  // Never blocks: whether op `n` completed (then a later wait returns at once). Throws the
  // failure of a read (a mismatch, a peer's memory gone).
  bool test(uint32_t n);
  // Until op `n` completed (true) or `until` (false). Throws PeerFailure (a peer's process
  // ended, or it gave up on the group), the group's poison, or a read's failure.
  bool wait(uint32_t n, Clock::time_point until, const OpRef& op);
  // The TimeoutError of op `n` at its own deadline, naming the ranks that never arrived.
  [[noreturn]] void fail_timeout(uint32_t n, const OpRef& op);
  // " group rank(s) 1 did not arrive;" for op `n` (or who did not finish reading it).
  std::string not_arrived(uint32_t n) const;
  // After one of the group's shared-memory ops failed on this rank (its deadline, a peer's
  // death, a mismatch): forgets every started op, so that nothing writes into the buffers of
  // ops whose Works failed or will fail (a stopped peer that resumes would otherwise let them
  // complete after their callers got them back), and makes every later wait fail at once.
  // `why`: the failure, which later waits of the group's ops on this rank raise again (the
  // progress thread may meet a peer's death before the op's own waiter does).
  void abandon(std::exception_ptr why = nullptr);

  // The progress thread's step (runtime/progress.h): advances this group's started ops without
  // blocking, so that a rank waiting on something else (another op, in another order) still
  // reads what its peers wait for it to read. True while ops are in flight. Swallows failures:
  // the op's own test or wait meets them again.
  bool poll_in_background();

 private:
  GroupShm(GroupImpl& g, SharedSegment segment);

  // ReduceSlice and GatherSlices are the two halves of a large all_reduce (ops n and n + 1).
  // PushBlocks and PullBlocks are the two halves of a large gather (ops n and n + 1).
  enum class Kind : uint8_t {
    Barrier, AllReduce, AllToAll, ReduceSlice, GatherSlices, Gather, ReduceBlock, PushBlocks,
    PullBlocks
  };
  struct Pending {
    uint32_t n = 0;
    Kind kind = Kind::Barrier;
    bool read = false;  // the first step ran: this rank said done
    void* out = nullptr;
    size_t count = 0;
    DType dtype = DType::Float32;
    ReduceOp reduce = ReduceOp::Sum;
    const AllToAllBlocks* blocks = nullptr;  // all_to_all
    const void* in = nullptr;  // a gather's own block, which need not be copied onto itself
    const char* name = nullptr;  // the collective, for messages (null: by kind)
    size_t first = 0;     // a reduce_scatter's block: its first element in the input
    bool gather = true;   // a large all_reduce's second half reads the slices
    bool small = false;   // an all_reduce whose inputs are in the slots' `small` (kSmallBytes)
    // An all_to_all whose blocks for the peers lie in this rank's slot: no peer reads its
    // buffers, so it completes once this rank read its own blocks.
    bool sends_in_slot = false;
    // An all_to_all that lets peers write blocks into its outputs: it completes once every
    // peer said done, whatever the way of its own sends.
    bool accepts = false;
    Clock::time_point started{};  // when this rank issued it (the progress thread's first look)
  };
  static constexpr uint32_t kRing = 2 * kDepth;

  Header* header() const { return header_of(segment_.base()); }
  Slot* slot(int r) const { return slot_of(segment_.base(), r); }
  // Takes op number n and waits until its buffer is free (every rank done with op n - kDepth).
  uint32_t begin(const OpRef& op);
  // Appends op `p` (its number taken by begin) to the ring, issued at `issued`. mu_ held.
  Pending& push(uint32_t n, Kind kind, Clock::time_point issued);
  // Advances this rank's started ops as far as the peers allow. mu_ held.
  void progress();
  // Whether an op of `kind` reads its peers' own buffers (not the segment's slots).
  static bool reads_peers(Kind kind);
  // After reading peers' buffers, before saying done: throws PeerFailure when another rank
  // abandoned its ops (Header::released), as what was read may be its caller's new bytes.
  void check_nobody_released(const Pending& p);
  // set_pause_before_reads_for_testing's hook, if set.
  void pause_for_testing(const Pending& p) const;
  void read_all_reduce(const Pending& p);
  void read_all_to_all(const Pending& p);
  // Throws MismatchError naming the first pair of ranks whose block sizes disagree.
  void check_block_sizes(const Pending& p) const;
  // Reads rank r's block `from` (published in its slot) into this rank's block `to`.
  void read_block(int r, const Block& from, const BlockRef& to, const Pending& p);
  // Writes this rank's block `from` into rank r's receive block `to` (which r accepts), by
  // mapping r's arena (with streaming stores, unfenced, when `streaming`), else through the
  // kernel (process_vm_writev).
  void write_block(int r, const RecvPlace& to, const BlockRef& from, const Pending& p,
                   bool streaming);
  // A peer's block as read_block finds it: `count` runs over `base` in the peer's process
  // (a whole block is one run), holding `bytes`.
  struct RemoteBlock {
    uint64_t base;
    const ByteRun* runs;
    size_t count;
    uint64_t bytes;
  };
  // Copies `from` into `to` out of the peer's mapped arena when all of it lies there: false
  // (nothing copied) when it does not.
  bool copy_mapped(int r, const RemoteBlock& from, const BlockRef& to);
  void read_reduce_slice(const Pending& p);
  void read_gather_slices(const Pending& p);
  void read_gather(const Pending& p);
  void read_reduce_block(const Pending& p);
  // Throws MismatchError naming the first pair of ranks whose block sizes in a large gather
  // disagree.
  void check_gather_sizes(const Pending& p) const;
  void read_push_blocks(const Pending& p);
  void read_pull_blocks(const Pending& p);
  // Where a large all_reduce writes its finished slice in a peer's output: at `mapped` in this
  // process, or, where null, at `address` of rank `rank`'s memory through the kernel.
  struct SliceTarget {
    unsigned char* mapped;
    int rank;
    uint64_t address;
  };
  // Reduces elements [first, last) of every rank's input (its address published in buffer `b`
  // of each slot) in rank order into `out`, which holds element `first` at its start, and
  // copies each finished chunk into `copies` (peers' outputs, at the same place; may be null).
  // With `streaming`, the chunks are summed in a buffer of this process's and written into
  // `out` with streaming stores.
  void reduce_range(const Pending& p, uint32_t b, size_t first, size_t last, unsigned char* out,
                    const std::vector<SliceTarget>* copies, bool streaming = false);
  // reduce_range for float16 and bfloat16 (p.dtype), which the engine sums in float32: each
  // chunk's pieces widened in the cache, summed, divided for Avg (p.reduce), rounded into `out`.
  void reduce_range_widened(const Pending& p, uint32_t b, size_t first, size_t last,
                            unsigned char* out, const std::vector<SliceTarget>* copies,
                            bool streaming);
  // A finished chunk of `bytes` at `from` into every target, `offset` bytes into its slice.
  void copy_finished(const std::vector<SliceTarget>& copies, size_t offset,
                     const unsigned char* from, size_t bytes, const Pending& p);
  // Where rank r published its input for op buffer b, as the start of one buffer holding this
  // rank's block at its place (a reduce_scatter's list form publishes each block's own).
  uint64_t peer_input(uint32_t b, int r) const;
  // Sets direct_: each peer's bytes [offset, offset + bytes) of its input (peer_input), where
  // they lie mapped in this process (its arena), else null (read through the kernel a chunk
  // at a time).
  void map_peer_slices(uint32_t b, uint64_t offset, size_t bytes);
  // copy_from, writing `to` with streaming stores (through a buffer when the kernel reads).
  void stream_from(int r, uint64_t address, unsigned char* to, size_t bytes, const Pending& p);
  // The collective that `p` is, for messages.
  static const char* name_of(const Pending& p);
  // Copies `bytes` at `address` of group rank r (this rank, or a peer's mapped arena: a plain
  // copy) into `to`.
  void copy_from(int r, uint64_t address, void* to, size_t bytes, const Pending& p);
  // Where `bytes` at `address` of peer r lie in this process when r placed them in its shared
  // arena and this rank could map it (peer_arenas.h), else null. mu_ held.
  const unsigned char* mapped(int r, uint64_t address, size_t bytes);
  // Lists this process's shared-arena chunks in its slot, before a large op arrives.
  void publish_arenas() { arenas_.publish(*slot(rank_)); }
  // Stores `value` into a counter and wakes the sleepers, if any.
  void publish(std::atomic<uint32_t>& counter, uint32_t value);
  // Stores `value` into this rank's `counter` (`arrived` or `done`, which only grow) and wakes
  // the sleepers when every rank's counter has reached its old value + 1, if anyone sleeps.
  void advance(std::atomic<uint32_t> Slot::*counter, uint32_t value);
  // Publishes `arrived` = n (the op's part is in place) of an op issued at `issued`.
  void arrive(uint32_t n, Clock::time_point issued);
  // Writes op n's call into this rank's slot. Every start signs (and writes a small payload)
  // after its push, just before it arrives: the call word, the small payload and `arrived`
  // share the line a waiting peer keeps reading, and stores to it on both sides of the ring's
  // lock took that line from the peer twice per op instead of once.
  void sign(uint32_t n, const OpRef& op);
  // Throws MismatchError when a rank called another collective as its op `p.n`.
  void compare_calls(const Pending& p);
  // Spins, then sleeps, until `ready()` (asked under mu_ after progress) or `until`.
  bool wait_for(FunctionRef<bool()> ready, Clock::time_point until, const OpRef& op);
  // Throws when waiting longer is pointless: a peer ended or gave up, the group is poisoned.
  void check_peers_or_throw(const OpRef& op);
  // Tells the peers that this rank gave up on the group.
  void give_up();
  // Reads `bytes` at `address` of group rank r's process into `to` (process_vm_readv).
  void read_peer(int r, uint64_t address, void* to, size_t bytes, const Pending& p);
  // Writes `bytes` from `from` at `address` of group rank r's process (process_vm_writev).
  void write_peer(int r, uint64_t address, const void* from, size_t bytes, const Pending& p);
  // Throws what a failed read of rank r's memory (errno `err`), or with `writing` a failed
  // write into it, means: the peer ended, or gave up, or the access itself failed.
  [[noreturn]] void fail_access(int r, int err, size_t bytes, const Pending& p,
                                bool writing = false);
  // This rank's own block of an all_to_all, copied from its send layout into its receive one.
  static void copy_own(const BlockRef& from, const BlockRef& to);
  std::string who(int r) const;

  GroupImpl* group_;     // for its poison, in waits by the op's owner only
  std::string describe_;  // the group, for messages (the progress thread may outlive it)
  std::vector<int> members_;
  SharedSegment segment_;
  PeerProcesses peers_;
  PeerArenas arenas_;  // the peers' mapped chunks (read under mu_; published by starts)
  int rank_;
  int size_;
  bool oversubscribed_;  // more ranks on this host than cores: yield and sleep soon
  // The host's ranks fill its cores: the progress thread first looks at an op only once it has
  // been in flight for kFirstLook (arrive, poll_in_background).
  bool looked_at_late_;
  std::mutex mu_;        // the ring and the reads; never held while sleeping
  uint32_t next_ = 0;    // the last op number taken (starts are serialized by the group)
  // Every rank's `done` had reached this when begin() last read them (as next_: by starts).
  uint32_t all_done_ = 0;
  int readable_ = -1;    // peers_readable(): -1 not asked yet
  std::atomic<uint32_t> completed_{0};
  std::atomic<uint32_t> head_n_{0};  // the oldest started op not completed, 0 if none
  std::atomic<bool> abandoned_{false};
  std::exception_ptr failure_;  // the first failure that abandoned the ops; guarded by mu_
  // abandon() with mu_ held.
  void abandon_locked(std::exception_ptr why);
  std::array<Pending, kRing> ring_;
  // Storage on a cache line's boundary, as tensors are (a std::vector's lies 16 bytes past
  // one): the kernel's copy into a buffer whose offset within a line differs from its source's
  // runs slower on this host's CPUs, and so do the combine's loads that straddle two lines.
  // In-place reductions, which read their peers' pieces into these buffers, took 0.74-0.95x
  // the time at 2 ranks and 0.71-0.94x at 4 once aligned (4 alternated rounds, 1-64 MiB).
  template <class T>
  struct LineAligned {
    using value_type = T;
    LineAligned() = default;
    template <class U>
    LineAligned(const LineAligned<U>&) {}
    T* allocate(size_t n) {
      return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{kLine}));
    }
    void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t{kLine}); }
    bool operator==(const LineAligned&) const { return true; }
  };
  using ChunkBuffer = std::vector<unsigned char, LineAligned<unsigned char>>;
  // A large all_reduce's chunks in flight through the reduction (read under mu_ only).
  ChunkBuffer acc_, chunk_, sum_, narrow_;
  // The large all_reduce's kind of stores (rank 0's choice, which every rank takes), the
  // current op's (its halves run in turn), and the time its first half took (under mu_ only).
  StoreChoosers stores_;
  // The all_to_all's kind of stores for the blocks it writes into its peers' outputs, this
  // rank's own choice (under mu_ only).
  StoreChoosers push_stores_;
  bool streaming_ = false;
  uint64_t reduce_half_ns_ = 0;
  // Per peer, where its input's slice lies mapped in this process, or null (under mu_ only).
  std::vector<const unsigned char*> direct_;
  // Where a large gather writes this rank's block (read under mu_ only).
  std::vector<unsigned char*> targets_;
  // Where a large all_reduce writes its finished slice (read under mu_ only).
  std::vector<SliceTarget> slice_targets_;
  // A laid-out block's runs, fetched from the peer that sends it (read under mu_ only).
  std::vector<ByteRun> peer_runs_;
  uint32_t head_ = 0, tail_ = 0;  // ring_[head_ % kRing] is the oldest op not completed
};

}  // namespace ferry::detail::shm
