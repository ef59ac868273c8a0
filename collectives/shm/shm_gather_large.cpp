// A gather above the segment's slots (all_gather, all_gather_v, broadcast; gather_blocks.h) in
// two halves, which lets a rank write its block into its peers' outputs when they lie in
// shared memory, so that each block is read once, by its owner, where pulling it would read it
// once per rank (the copy limit of an out-of-place all_gather counts each input read once).
//
// First half (op n): every rank publishes where its block lies and, for each rank, where that
// rank's block goes in its output and how large it is, and whether peers may write there (its
// op is started at issue, whose Work keeps the output for the life of the process if the op
// fails, so that a late write lands nowhere else). Once all arrived, every rank checks every
// pair's sizes (all raise the same MismatchError before any byte moves), copies its own block
// into its output, writes its block into each peer that accepts and whose output it could map
// for writing (peer_arenas.h), and lists those peers in its slot before it says done.
// Second half (op n + 1, once every rank is done with the first): every rank copies the blocks
// no peer wrote for it out of their owners' buffers (a mapping, or the kernel), and the op
// completes once every rank is done, since peers read this rank's block until then.
#include <ferry/collectives/shm/shm_group.h>
#include <ferry/collectives/shm/store_chooser.h>

#include <ferry/runtime/error.h>

#include <algorithm>
#include <cstring>

namespace ferry::detail::shm {
namespace {

// What a rank publishes, in the buffers of both numbers (the second half reads it when a
// rank that ran ahead may reuse the first's buffer), followed by `Place`s, one per rank, and,
// in the second number's buffer, a byte per rank: 1 where this rank wrote its block.
struct GatherHeader {
  uint64_t own;        // this rank's block
  uint64_t own_bytes;
  uint64_t accepts;    // 1: peers may write their blocks into this rank's output
  uint64_t pad;
};
struct Place {
  uint64_t address;  // where rank r's block goes in this rank's output
  uint64_t bytes;    // the size this rank expects of it
};

const GatherHeader& header_in(const unsigned char* data) {
  return *reinterpret_cast<const GatherHeader*>(data);
}
const Place* places_in(const unsigned char* data) {
  return reinterpret_cast<const Place*>(data + sizeof(GatherHeader));
}

// The piece of a block copied to every target before the next: it stays in a core's L2.
constexpr size_t kPushChunk = 256 * 1024;

}  // namespace

bool GroupShm::large_gather_fits(int ranks) {
  const auto w = static_cast<size_t>(ranks);
  return sizeof(GatherHeader) + w * (sizeof(Place) + 1) <= kSlotBytes;
}

uint32_t GroupShm::start_large_gather(const OpRef& op, const GatherBlocks& blocks,
                                      bool accept_writes) {
  FERRY_CHECK(large_gather_fits(size_), Error, op.name, ": ", size_, " ranks have more block "
              "places than a shared-memory slot holds (internal error: the op should have "
              "chosen another way)");
  const uint32_t n = begin(op);
  const uint32_t pull = begin(op);
  publish_arenas();
  const BlockRef own = blocks.send(0, rank_);
  const GatherHeader mine{reinterpret_cast<uintptr_t>(own.span), own.bytes,
                          accept_writes ? 1u : 0u, 0};
  for (uint32_t k : {n, pull}) {
    unsigned char* data = slot(rank_)->data[k % kDepth];
    std::memcpy(data, &mine, sizeof mine);
    auto* places = reinterpret_cast<Place*>(data + sizeof mine);
    for (int r = 0; r < size_; ++r) {
      const BlockRef to = blocks.recv(0, r);
      places[r] = Place{reinterpret_cast<uintptr_t>(to.span), to.bytes};
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint32_t k : {n, pull}) {
      Pending& p = push(k, k == n ? Kind::PushBlocks : Kind::PullBlocks, op.issued);
      p.blocks = &blocks;
      p.name = op.name;
    }
  }
  sign(n, op);
  sign(pull, op);
  arrive(pull, op.issued);  // both halves: the second waits for every first, not for an arrival
  return pull;
}

void GroupShm::check_gather_sizes(const Pending& p) const {
  const uint32_t b = p.n % kDepth;
  for (int r = 0; r < size_; ++r) {
    const uint64_t sent = header_in(slot(r)->data[b]).own_bytes;
    for (int q = 0; q < size_; ++q) {
      const uint64_t expected = places_in(slot(q)->data[b])[r].bytes;
      if (sent != expected)
        FERRY_THROW(MismatchError, name_of(p), " (shm op ", p.n, ") on ", describe_, ": ",
                    who(r), " gives a block of ", sent, " B, where ", who(q), " expects ",
                    expected, " B from it: the ranks' sizes do not match (found by every rank "
                    "before any data was written)");
    }
  }
}

void GroupShm::read_push_blocks(const Pending& p) {
  check_gather_sizes(p);
  const uint32_t b = p.n % kDepth;
  const GatherHeader& mine = header_in(slot(rank_)->data[b]);
  const Place* my_places = places_in(slot(rank_)->data[b]);
  const auto* own = reinterpret_cast<const unsigned char*>(mine.own);
  // Which peers this rank writes to, in the second half's buffer (this rank's until it says
  // done with op n + 1; its peers read it once it said done with op n).
  unsigned char* wrote = slot(rank_)->data[(p.n + 1) % kDepth] + sizeof(GatherHeader) +
                         static_cast<size_t>(size_) * sizeof(Place);
  std::memset(wrote, 0, static_cast<size_t>(size_));
  const size_t bytes = mine.own_bytes;
  if (bytes == 0) return;
  // Where this rank's block goes: its own output (unless it lies there already, in place),
  // then each peer that accepts and whose output this rank could map for writing.
  targets_.clear();
  if (my_places[rank_].address != mine.own)
    targets_.push_back(reinterpret_cast<unsigned char*>(my_places[rank_].address));
  for (int k = 1; k < size_; ++k) {
    const int q = (rank_ + k) % size_;
    if (header_in(slot(q)->data[b]).accepts != 1) continue;
    const Place& to = places_in(slot(q)->data[b])[rank_];
    if (unsigned char* at =
            arenas_.find_writable(q, *slot(q), peers_.pid(q), to.address, bytes, describe_)) {
      targets_.push_back(at);
      wrote[q] = 1;
      count_single_copy(Way::Written, bytes);
    }
  }
  // Where the outputs of all the ranks together outgrow the cache (each output is the sum of
  // its places), streaming stores: an ordinary store would first read each output line from
  // memory. Shared 64 MiB all_gathers took 0.78-0.81x the time at 2 and 4 ranks; below the
  // cache's size streaming took up to 2.5x, the outputs then coming from memory.
  size_t output_bytes = 0;
  for (int r = 0; r < size_; ++r) output_bytes += my_places[r].bytes;
  const bool streaming = writes_outgrow_cache(output_bytes * static_cast<size_t>(size_));
  // A piece at a time, so that the block is read from memory once and its copies come out of
  // the cache.
  for (size_t at = 0; at < bytes; at += kPushChunk) {
    const size_t n = std::min(kPushChunk, bytes - at);
    for (unsigned char* to : targets_) {
      if (streaming)
        stream_copy_unfenced(to + at, own + at, n);
      else
        std::memcpy(to + at, own + at, n);
    }
  }
  if (streaming) {
    stream_fence();
    count_single_copy(Way::Streamed, bytes * targets_.size());
  }
}

void GroupShm::read_pull_blocks(const Pending& p) {
  const uint32_t b = p.n % kDepth;
  const Place* my_places = places_in(slot(rank_)->data[b]);
  const size_t wrote_at = sizeof(GatherHeader) + static_cast<size_t>(size_) * sizeof(Place);
  for (int k = 1; k < size_; ++k) {
    const int r = (rank_ + k) % size_;
    if (slot(r)->data[b][wrote_at + static_cast<size_t>(rank_)] == 1) continue;
    const GatherHeader& theirs = header_in(slot(r)->data[b]);
    copy_from(r, theirs.own, reinterpret_cast<void*>(my_places[r].address), theirs.own_bytes, p);
  }
}

}  // namespace ferry::detail::shm
