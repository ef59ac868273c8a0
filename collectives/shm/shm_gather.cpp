// A gather through the segment's slots (all_gather, all_gather_v, broadcast; gather_blocks.h):
// each rank copies its block, or a piece of it, into its buffer of the op, and every rank copies
// every rank's piece to its place in its output once all arrived. As the small all_reduce, it
// costs a copy in and W copies out, with no system call: the path for blocks of up to a slot.
// Larger blocks are copied between the ranks' tensors in two halves (shm_gather_large.cpp), or,
// where the ranks cannot read each other's memory, go through the slots a piece at a time.
#include <ferry/collectives/shm/shm_group.h>

#include <ferry/runtime/error.h>

#include <algorithm>
#include <cstring>

namespace ferry::detail::shm {
namespace {

// What a rank writes before its piece: its whole block's size (every rank's block places
// follow from them, in rank order) and where in its block the piece lies.
struct PieceHeader {
  uint64_t block;
  uint64_t at;
  uint64_t bytes;
};
static_assert(sizeof(PieceHeader) + GroupShm::kGatherPiece == kSlotBytes);

}  // namespace

const char* GroupShm::name_of(const Pending& p) {
  if (p.name != nullptr) return p.name;
  return p.kind == Kind::AllToAll ? "all_to_all_single" : "all_reduce";
}

uint32_t GroupShm::start_gather(const OpRef& op, const GatherBlocks& blocks, size_t at) {
  const size_t mine = blocks.bytes(rank_);
  const size_t bytes = at < mine ? std::min(kGatherPiece, mine - at) : 0;
  const uint32_t n = begin(op);
  unsigned char* data = slot(rank_)->data[n % kDepth];
  const PieceHeader header{mine, at, bytes};
  std::memcpy(data, &header, sizeof header);
  if (bytes > 0)
    std::memcpy(data + sizeof header, static_cast<const char*>(blocks.own()) + at, bytes);
  size_t total = 0;
  for (int r = 0; r < size_; ++r) total += blocks.bytes(r);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Pending& p = push(n, Kind::Gather, op.issued);
    p.out = blocks.out();
    p.in = blocks.own();
    p.count = total;
    p.name = op.name;
  }
  sign(n, op);
  arrive(n, op.issued);
  return n;
}

void GroupShm::read_gather(const Pending& p) {
  const uint32_t b = p.n % kDepth;
  auto* out = static_cast<unsigned char*>(p.out);
  // Rank r's block starts where rank r - 1's ends: the places follow from the published sizes,
  // which the ranks' calls (compared before this) agree on.
  size_t place = 0;
  for (int r = 0; r < size_; ++r) {
    PieceHeader h;
    std::memcpy(&h, slot(r)->data[b], sizeof h);
    // (A rank whose block ended before this piece publishes no bytes at an offset past it.)
    FERRY_CHECK((h.bytes == 0 || h.at + h.bytes <= h.block) && place + h.block <= p.count &&
                    h.bytes <= kGatherPiece,
                Error, name_of(p), " (shm op ", p.n, ") on ", describe_, ": ", who(r),
                " published a piece of ", h.bytes, " B at ", h.at, " of a ", h.block,
                " B block, which this rank's output of ", p.count,
                " B does not hold (internal error: the calls were compared)");
    if (h.bytes > 0) {
      unsigned char* to = out + place + h.at;
      const bool own_in_place =
          r == rank_ && to == static_cast<const unsigned char*>(p.in) + h.at;
      if (!own_in_place) std::memcpy(to, slot(r)->data[b] + sizeof h, h.bytes);
    }
    place += h.block;
  }
}

}  // namespace ferry::detail::shm
