// The layout of a group's shared-memory segment (internal).
//
// One segment per group whose ranks share a host (shared_segment.h makes it): a header, then one
// slot per group rank. Every word a rank writes lives in its own slot, on cache lines no other
// rank writes, so a hand-off costs one line moving from the writer's core to the reader's
// (~0.04 us here) and no line bounces between two writers. The counters are per-group op
// numbers (1, 2, ... over the group's shared-memory ops only, the same on every rank, since every
// rank issues the same collectives in the same order); they wrap at 2^32 and are compared by
// signed difference.
//
// An op n of a rank moves through two counters of its slot:
//   arrived = n  its part is published: its payload copied into data[n % kDepth] (all_reduce;
//                small[n % kDepth], on the line of `arrived`, up to kSmallBytes), or its buffer's
//                address and block places written there (all_to_all; small blocks themselves);
//   done = n     it finished reading every peer's part of op n.
// A rank may write data[n % kDepth] for op n only once every peer's `done` reached n - kDepth:
// nobody reads the old payload any more. Depth 4 lets a rank run 3 ops ahead of the slowest
// before it waits, which is more than a training step's back-to-back collectives need.
#pragma once

#include <ferry/runtime/shared_arena.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ferry::detail::shm {

inline constexpr size_t kLine = 64;
inline constexpr uint32_t kDepth = 4;
// The payload per rank and op that the all_reduce copies through the segment (the algorithm
// table's shm rows stay at or below it); 4 of them a rank, so a group of 4 maps 265 KiB.
inline constexpr size_t kSlotBytes = 16 * 1024;
inline constexpr uint64_t kMagic = 0x6665727279736d33ull;  // "ferrysm3"
inline constexpr size_t kFingerprintBytes = 128;
// The largest all_reduce input carried on a slot's counter line (Slot::small): an 8 B
// all_reduce (two float32, one float64) is then one line per rank and hand-off.
inline constexpr size_t kSmallBytes = 8;

// The word a slot's `call` holds for an op: its check hash with its sequence number mixed in by
// a bijection (multiplying by an odd constant), so that two calls of one collective at different
// sequence numbers never give the same word, and calls that differ otherwise collide as rarely
// as their check hashes do.
constexpr uint32_t call_word(uint32_t check, uint64_t seq) {
  return check ^ (static_cast<uint32_t>(seq) * 0x9E3779B1u);
}

static_assert(std::atomic<uint32_t>::is_always_lock_free);

// Whether op number `a` is at or after `b`, across the wrap.
constexpr bool reached(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) >= 0; }

struct alignas(kLine) Header {
  uint64_t magic;
  uint32_t ranks;
  uint32_t slot_bytes;
  // The futex word every sleeping waiter waits on: bumped (and the sleepers woken) by a writer
  // of any counter that sees sleepers > 0, so a writer that finds nobody asleep pays no syscall.
  alignas(kLine) std::atomic<uint32_t> epoch;
  std::atomic<uint32_t> sleepers;
  // 0, or 1 + the group rank of the first rank that gave up on the group (its op failed other
  // than by its own deadline, or its group was poisoned): the others fail with PeerFailure
  // instead of waiting for their deadline.
  std::atomic<int32_t> gave_up;
  // 0, or 1 + the group rank of the first rank whose process some rank found ended: a survivor
  // whose own read then fails (a peer that failed on that death and let go of its buffers, or
  // exited) names the rank that died, not the one that let go.
  std::atomic<int32_t> ended;
  // 0, or 1 + the group rank of the first rank that abandoned its shared-memory ops, whatever
  // the failure (its own deadline included, which does not give up): its callers may reuse the
  // buffers its peers read. A peer that finishes reading a rank's buffers after this was set
  // fails the op instead of completing it with bytes that may be the caller's new ones.
  std::atomic<int32_t> released;
};

// A piece of an op's input, `bytes` at `data` (reduce_scatter's list form: one per rank).
struct InputPiece {
  const void* data;
  size_t bytes;
};

// A rank's all_to_all block as its peers read it, in its process: `bytes` at `address` when
// `run_count` is 0, else laid out as the `run_count` runs (backends/byte_layout.h's ByteRun,
// offsets from `address`) listed at `runs`, which the reader fetches first.
// A block of at most a slot's spare room travels in the slot itself instead (run_count
// kInSlot): its bytes at `address` from the start of the sender's data[n % kDepth].
struct Block {
  uint64_t address;
  uint64_t bytes;
  uint64_t runs;
  uint64_t run_count;
};
inline constexpr uint64_t kInSlot = UINT64_MAX;

// Where a rank receives a peer's all_to_all block: the `bytes` it expects and, when `accepts`
// is 1, where the sender may write them itself: at `address` in the receiver's process (its
// shared arena), whole when `run_count` is 0, else laid out as the `run_count` runs copied
// into the receiver's slot from ByteRun index `runs_at` (after the op's places).
struct RecvPlace {
  uint64_t bytes;
  uint64_t address;
  uint32_t runs_at;
  uint32_t run_count;
  uint32_t accepts;
  uint32_t pad;
};

struct alignas(kLine) Slot {
  // Written once at setup, before the rank confirms it mapped the segment.
  int32_t pid;
  std::atomic<uint32_t> cma;   // 0 not probed yet, 1 this rank reads peers by CMA, 2 it cannot
  uint64_t segment_address;    // where this rank mapped the segment (for the CMA probe)
  alignas(kLine) std::atomic<uint32_t> arrived;
  // Op n's call, written before `arrived` = n, on the line the peers read anyway: call_word() of
  // the hash of its fingerprint (engine/fingerprint.h's check_hash) and its sequence number.
  // Every rank compares them before it reads op n's data, as the tags of the point-to-point
  // paths do, so ranks that called different collectives get MismatchError instead of mixed
  // data.
  uint32_t call[kDepth];
  // An all_reduce's input of at most kSmallBytes (the whole op's, every rank's the same size):
  // on the line the peers read anyway, so that they take one line from this rank, not two.
  // Written for op n before `arrived` = n, and, as data[n % kDepth], only once every rank is done
  // with op n - kDepth.
  unsigned char small[kDepth][kSmallBytes];
  // On a line of its own: a waiting peer reads `arrived` until this rank arrives, which leaves
  // that line shared, whereas `done` is read only when a buffer comes round again (every
  // kDepth - 1 ops, begin()) or by the ops whose peers read this rank's buffers. On the
  // counters' line, each op's store of `done` had to take the line back from the peer first.
  alignas(kLine) std::atomic<uint32_t> done;
  // The whole fingerprint, read only to describe a mismatch.
  alignas(kLine) unsigned char fingerprint[kDepth][kFingerprintBytes];
  // The rank's shared-arena chunks (runtime/shared_arena.h) that its peers may map, in its
  // order of making: entries [0, arena_count) are final. A rank appends the chunks it made
  // since its last large op before that op arrives, so a peer that sees the op's `arrived`
  // sees every chunk its buffers can lie in (peer_arenas.h).
  alignas(kLine) std::atomic<uint32_t> arena_count;
  SharedChunk arenas[kMaxSharedChunks];
  alignas(kLine) unsigned char data[kDepth][kSlotBytes];
};

static_assert(offsetof(Slot, small) + sizeof(Slot::small) - offsetof(Slot, arrived) <= kLine,
              "a slot's arrival counter, calls and small inputs share one cache line");

inline size_t segment_bytes(int ranks) {
  return sizeof(Header) + static_cast<size_t>(ranks) * sizeof(Slot);
}

inline Header* header_of(void* base) { return static_cast<Header*>(base); }
inline Slot* slot_of(void* base, int rank) {
  return reinterpret_cast<Slot*>(static_cast<char*>(base) + sizeof(Header)) + rank;
}

}  // namespace ferry::detail::shm
