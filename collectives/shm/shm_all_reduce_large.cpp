// The all_reduce above the segment's slots, by single copy: a reduce-scatter in which rank r
// reads slice r of every rank's input straight out of their buffers (process_vm_readv) and
// reduces it, then an all-gather in which every rank reads the finished slices out of the
// others' outputs. Each byte crosses between processes twice, as in MPICH's one-host
// algorithms, and no rank reduces more than its 1/W. The slice is reduced in chunks that stay
// in the cache (the design guide: memcpy runs 60-140 GB/s in cache, ~20 GB/s beyond), in rank
// order, so every rank, and the direct exchange, get the same bits. A reduce_scatter is the
// first half alone, each rank's slice its own block; a reduce, both halves with the second on
// the root only. Where a rank's output accepts writes (an op started at issue on memory ferry
// owns), each peer writes its finished slice into it, each chunk while still in its cache (by
// mapping when the output is shared, else by process_vm_writev), and the second half reads
// nothing: a rank then only ever touches its own slice of every buffer, which stays in its
// cache from one op to the next (a 1 MiB all_reduce of ordinary tensors in place went from 3x
// the copy ideal to 0.45x). The all_reduce writes lines its peers read at the last op: with
// ordinary or streaming stores, whichever has been faster lately (store_chooser.h).
#include <ferry/collectives/shm/shm_group.h>

#include <ferry/collectives/engine/reduce_kernels.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/tensor_detail.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace ferry::detail::shm {
namespace {

// Chunks of the reduction: two of them (the running sum and the next rank's piece) stay in a
// core's 2 MiB L2 with room to spare.
constexpr size_t kChunkBytes = 256 * 1024;

// The addresses a rank publishes for its large all_reduce (in its buffers of both numbers),
// whether its peers may write their finished slices into its output, and on rank 0 whether the
// op writes with streaming stores: every rank takes rank 0's choice, so that the time rank 0
// measures is that of an op run one way throughout (its reads of the peers' slices cost what
// their stores made them cost), which rank 0's chooser compares. In the second
// number's buffer, after it, a byte per rank: 1 where this rank wrote its slice.
// A reduce_scatter whose input is a list (`listed`) is followed by one word per rank r: where
// element 0 of the input would lie were block r where it is (its address less the elements
// before it), so that a reader finds element i of its block at that word + i, as in one buffer.
struct LargeBuffers {
  uint64_t in;
  uint64_t out;
  uint64_t accepts;
  uint64_t listed;
  uint64_t streaming;
};

// Slice r of `count` elements among `ranks`: [first, first + size).
size_t slice_first(size_t count, int ranks, int r) {
  return count * static_cast<size_t>(r) / static_cast<size_t>(ranks);
}

}  // namespace

uint32_t GroupShm::start_large_all_reduce(const OpRef& op, const void* in, void* out,
                                          size_t count, DType dtype, ReduceOp reduce,
                                          bool gather_here, bool accept_writes) {
  const uint32_t n = begin(op);
  const uint32_t gather = begin(op);
  publish_arenas();
  // In the buffers of both numbers: the second half reads them after every rank is done with
  // the first, when a rank that ran ahead may already reuse the first's buffer for a later op.
  bool streaming = false;
  if (rank_ == 0) {
    std::lock_guard<std::mutex> lock(mu_);
    streaming = stores_.of(count * dtype_size(dtype), in == out).next_streaming();
  }
  LargeBuffers mine{reinterpret_cast<uintptr_t>(in), reinterpret_cast<uintptr_t>(out),
                    accept_writes && gather_here ? 1u : 0u, 0, streaming ? 1u : 0u};
  std::memcpy(slot(rank_)->data[n % kDepth], &mine, sizeof mine);
  std::memcpy(slot(rank_)->data[gather % kDepth], &mine, sizeof mine);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint32_t k : {n, gather}) {
      Pending& p = push(k, k == n ? Kind::ReduceSlice : Kind::GatherSlices, op.issued);
      p.out = out;
      p.count = count;
      p.dtype = dtype;
      p.reduce = reduce;
      p.gather = gather_here;
      p.name = op.name;
    }
  }
  sign(n, op);
  sign(gather, op);
  arrive(gather, op.issued);  // both halves: the gather waits for the slices, not for an arrival
  return gather;
}

void GroupShm::read_reduce_slice(const Pending& p) {
  const size_t first = slice_first(p.count, size_, rank_);
  const size_t last = slice_first(p.count, size_, rank_ + 1);
  const size_t elem = dtype_size(p.dtype), bytes = (last - first) * elem;
  const uint32_t b = p.n % kDepth;
  // The peers whose outputs take this rank's finished slice (those that accept, in shared
  // memory this rank could map for writing), listed in the second half's buffer, which is
  // this rank's until it says done with op n + 1 (its peers read it once it said done with n).
  unsigned char* wrote = slot(rank_)->data[(p.n + 1) % kDepth] + sizeof(LargeBuffers);
  std::memset(wrote, 0, static_cast<size_t>(size_));
  slice_targets_.clear();
  for (int k = 1; k < size_ && bytes > 0; ++k) {
    const int q = (rank_ + k) % size_;
    LargeBuffers theirs;
    std::memcpy(&theirs, slot(q)->data[b], sizeof theirs);
    if (theirs.accepts != 1) continue;
    const uint64_t at = theirs.out + first * elem;
    unsigned char* mapped =
        arenas_.find_writable(q, *slot(q), peers_.pid(q), at, bytes, describe_);
    if (mapped != nullptr) count_single_copy(Way::Written, bytes);
    slice_targets_.push_back(SliceTarget{mapped, q, at});
    wrote[q] = 1;
  }
  LargeBuffers rank_0;
  std::memcpy(&rank_0, slot(0)->data[b], sizeof rank_0);
  streaming_ = rank_0.streaming == 1;
  const uint64_t start = now_ns();
  unsigned char* slice = static_cast<unsigned char*>(p.out) + first * elem;
  if (accumulation_dtype(p.dtype) != p.dtype)
    reduce_range_widened(p, b, first, last, slice, &slice_targets_, streaming_);
  else
    reduce_range(p, b, first, last, slice, &slice_targets_, streaming_);
  reduce_half_ns_ = now_ns() - start;
}

uint64_t GroupShm::peer_input(uint32_t b, int r) const {
  LargeBuffers theirs;
  std::memcpy(&theirs, slot(r)->data[b], sizeof theirs);
  if (theirs.listed == 0) return theirs.in;
  uint64_t base;
  const size_t at = sizeof theirs + sizeof base * static_cast<size_t>(rank_);
  std::memcpy(&base, slot(r)->data[b] + at, sizeof base);
  return base;
}

void GroupShm::map_peer_slices(uint32_t b, uint64_t offset, size_t bytes) {
  direct_.assign(static_cast<size_t>(size_), nullptr);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    direct_[r] = mapped(r, peer_input(b, r) + offset, bytes);
    if (direct_[r] != nullptr) count_single_copy(Way::Mapped, bytes);
  }
}

size_t GroupShm::max_listed_blocks() {
  return (kSlotBytes - sizeof(LargeBuffers)) / sizeof(uint64_t);
}

void GroupShm::reduce_range(const Pending& p, uint32_t b, size_t first, size_t last,
                            unsigned char* out, const std::vector<SliceTarget>* copies,
                            bool streaming) {
  const size_t elem = dtype_size(p.dtype);
  if (acc_.size() < kChunkBytes) {
    acc_.resize(kChunkBytes);
    chunk_.resize(kChunkBytes);
  }
  if (streaming && sum_.size() < kChunkBytes) sum_.resize(kChunkBytes);
  const size_t per_chunk = std::max<size_t>(1, kChunkBytes / elem);
  LargeBuffers mine;
  std::memcpy(&mine, slot(rank_)->data[b], sizeof mine);
  // In place, this rank's input is the `out` the sum goes into: the sum of the ranks before
  // this one is made in the chunk buffers, and lands in `out` only when this rank's own piece
  // is combined with it (writing over that piece as it reads it). Copying the own piece aside
  // and summing in `out` from the start cost a tenth of a 4-rank reduce_scatter's time.
  // Streaming, the sum is made in sum_ and `out` written once at the chunk's end.
  const uintptr_t own_first = mine.in + first * elem, own_last = mine.in + last * elem;
  const auto to_first = reinterpret_cast<uintptr_t>(out);
  const bool own_in_out = own_first == to_first && !streaming;
  // Out of place (`out` holds none of this rank's input), a chunk's first peer piece is read
  // straight into `out` and summed there, instead of through a buffer of its own: the kernel's
  // copy writes whole lines of `out` without reading them first, where the combine's stores
  // would first fetch each line of an `out` not in the cache from memory, a pass over the
  // output that in place costs nothing (those lines are this rank's own input, read anyway).
  // The operands and their order are unchanged: the same bits.
  // Streaming, no piece goes into `out`: its lines are written once, by streaming stores.
  const bool into_out =
      !streaming && (to_first + (last - first) * elem <= own_first || to_first >= own_last);
  map_peer_slices(b, first * elem, (last - first) * elem);
  for (size_t at = first; at < last; at += per_chunk) {
    const size_t elems = std::min(per_chunk, last - at);
    const size_t bytes = elems * elem, offset = at * elem;
    unsigned char* const dest = out + (at - first) * elem;
    unsigned char* to = streaming ? sum_.data() : dest;
    // Rank 0's piece, then every other rank's combined in rank order, summed into `out` (in
    // place, from this rank's own piece on; before it, into a chunk buffer): in place `out` is
    // this rank's `in`, whose slice only this rank reads, and a combine may write over either
    // operand. A peer's piece read through the kernel goes into `out` while `out` holds nothing
    // yet that the sum still needs (out of place, until the first combine), else into the chunk
    // buffer the running sum is not in.
    bool to_free = into_out;
    auto piece = [&](int r, const unsigned char* sum) -> const unsigned char* {
      if (r == rank_) return reinterpret_cast<const unsigned char*>(mine.in + offset);
      if (direct_[r] != nullptr) return direct_[r] + (offset - first * elem);
      unsigned char* into = to_free ? to : sum == chunk_.data() ? acc_.data() : chunk_.data();
      to_free = false;
      read_peer(r, peer_input(b, r) + offset, into, bytes, p);
      return into;
    };
    const unsigned char* sum = piece(0, nullptr);
    for (int r = 1; r < size_; ++r) {
      const unsigned char* next = piece(r, sum);
      unsigned char* into = own_in_out && r < rank_ ? acc_.data() : to;
      combine(into, sum, next, elems, p.dtype, p.reduce);
      sum = into;
      to_free = false;
    }
    if (streaming) {
      stream_copy(dest, sum, bytes);
      count_single_copy(Way::Streamed, bytes);
    } else if (size_ == 1 && sum != to) {
      std::memmove(to, sum, bytes);
    }
    // The finished chunk, still in the cache, into the peers' outputs that take it.
    if (copies != nullptr) copy_finished(*copies, (at - first) * elem, sum, bytes, p);
  }
}

void GroupShm::copy_finished(const std::vector<SliceTarget>& copies, size_t offset,
                             const unsigned char* from, size_t bytes, const Pending& p) {
  for (const SliceTarget& t : copies) {
    if (t.mapped != nullptr)
      std::memcpy(t.mapped + offset, from, bytes);
    else
      write_peer(t.rank, t.address + offset, from, bytes, p);
  }
}

void GroupShm::reduce_range_widened(const Pending& p, uint32_t b, size_t first, size_t last,
                                    unsigned char* out,
                                    const std::vector<SliceTarget>* copies, bool streaming) {
  const size_t elem = dtype_size(p.dtype);
  const size_t per_chunk = kChunkBytes / sizeof(float);
  if (acc_.size() < kChunkBytes) {
    acc_.resize(kChunkBytes);
    chunk_.resize(kChunkBytes);
  }
  if (narrow_.size() < per_chunk * elem) narrow_.resize(per_chunk * elem);
  auto* sum = reinterpret_cast<float*>(acc_.data());
  auto* next = reinterpret_cast<float*>(chunk_.data());
  const uint64_t own = peer_input(b, rank_);
  map_peer_slices(b, first * elem, (last - first) * elem);
  const ReduceOp op = p.reduce == ReduceOp::Avg ? ReduceOp::Sum : p.reduce;
  for (size_t at = first; at < last; at += per_chunk) {
    const size_t elems = std::min(per_chunk, last - at);
    const size_t bytes = elems * elem, offset = at * elem;
    // Rank r's piece of the chunk, widened into `into`. In place, this rank's own piece is read
    // before the chunk's result is written over it (at the end of the chunk).
    auto widen = [&](int r, float* into) {
      const unsigned char* piece = nullptr;
      if (r == rank_) {
        piece = reinterpret_cast<const unsigned char*>(own + offset);
      } else if (direct_[r] != nullptr) {
        piece = direct_[r] + (offset - first * elem);
      } else {
        read_peer(r, peer_input(b, r) + offset, narrow_.data(), bytes, p);
        piece = narrow_.data();
      }
      convert_elements(piece, p.dtype, into, DType::Float32, static_cast<int64_t>(elems));
    };
    widen(0, sum);
    for (int r = 1; r < size_; ++r) {
      widen(r, next);
      combine(sum, sum, next, elems, DType::Float32, op);
    }
    if (p.reduce == ReduceOp::Avg) divide(sum, elems, DType::Float32, size_);
    unsigned char* const dest = out + (at - first) * elem;
    unsigned char* rounded = streaming ? narrow_.data() : dest;
    convert_elements(sum, DType::Float32, rounded, p.dtype, static_cast<int64_t>(elems));
    if (streaming) {
      stream_copy(dest, rounded, bytes);
      count_single_copy(Way::Streamed, bytes);
    }
    if (copies != nullptr) copy_finished(*copies, (at - first) * elem, rounded, bytes, p);
  }
}

void GroupShm::read_gather_slices(const Pending& p) {
  const uint64_t start = now_ns();
  const size_t elem = dtype_size(p.dtype);
  const uint32_t b = p.n % kDepth;  // this half's copy of the addresses (see the start)
  auto* out = static_cast<unsigned char*>(p.out);
  LargeBuffers mine;
  std::memcpy(&mine, slot(rank_)->data[b], sizeof mine);
  // In place, the peers read the other slices of `out` as input in the first half: those
  // lines are written with the chosen stores too. Out of place no peer reads them.
  const bool streaming = streaming_ && mine.in == mine.out;
  for (int k = 1; k < size_ && p.gather; ++k) {
    const int r = (rank_ + k) % size_;
    if (slot(r)->data[b][sizeof(LargeBuffers) + static_cast<size_t>(rank_)] == 1) continue;
    LargeBuffers theirs;
    std::memcpy(&theirs, slot(r)->data[b], sizeof theirs);
    const size_t first = slice_first(p.count, size_, r);
    const size_t last = slice_first(p.count, size_, r + 1);
    if (streaming)
      stream_from(r, theirs.out + first * elem, out + first * elem, (last - first) * elem, p);
    else
      copy_from(r, theirs.out + first * elem, out + first * elem, (last - first) * elem, p);
  }
  if (rank_ == 0)
    stores_.of(p.count * elem, mine.in == mine.out)
        .record(streaming_, reduce_half_ns_ + (now_ns() - start), p.count * elem);
}

void GroupShm::stream_from(int r, uint64_t address, unsigned char* to, size_t bytes,
                           const Pending& p) {
  count_single_copy(Way::Streamed, bytes);
  if (const unsigned char* from = mapped(r, address, bytes)) {
    stream_copy(to, from, bytes);
    count_single_copy(Way::Mapped, bytes);
    return;
  }
  // The kernel's copy writes with ordinary stores: into a buffer in the cache, a chunk at a
  // time, and on from there.
  for (size_t at = 0; at < bytes; at += kChunkBytes) {
    const size_t n = std::min(kChunkBytes, bytes - at);
    read_peer(r, address + at, chunk_.data(), n, p);
    stream_copy(to + at, chunk_.data(), n);
  }
}

uint32_t GroupShm::start_reduce_scatter(const OpRef& op, const void* in, void* out,
                                        size_t first, size_t count, DType dtype,
                                        ReduceOp reduce, std::span<const InputPiece> blocks) {
  FERRY_CHECK(blocks.empty() || (blocks.size() == static_cast<size_t>(size_) &&
                                 blocks.size() <= max_listed_blocks()),
              Error, op.name, ": ", blocks.size(), " input blocks for ", size_,
              " ranks (internal error: the op should have chosen another path)");
  const uint32_t n = begin(op);
  publish_arenas();
  unsigned char* data = slot(rank_)->data[n % kDepth];
  LargeBuffers mine{reinterpret_cast<uintptr_t>(in), reinterpret_cast<uintptr_t>(out), 0,
                    blocks.empty() ? 0u : 1u, 0};
  uint64_t before = 0;  // bytes of the blocks ahead of block r
  for (size_t r = 0; r < blocks.size(); ++r) {
    // Unsigned: the start may lie below the address space's first byte, the sum wraps back.
    const uint64_t base = reinterpret_cast<uintptr_t>(blocks[r].data) - before;
    std::memcpy(data + sizeof mine + r * sizeof base, &base, sizeof base);
    if (r == static_cast<size_t>(rank_)) mine.in = base;
    before += blocks[r].bytes;
  }
  std::memcpy(data, &mine, sizeof mine);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Pending& p = push(n, Kind::ReduceBlock, op.issued);
    p.out = out;
    p.first = first;
    p.count = count;
    p.dtype = dtype;
    p.reduce = reduce;
    p.name = op.name;
  }
  sign(n, op);
  arrive(n, op.issued);
  return n;
}

void GroupShm::read_reduce_block(const Pending& p) {
  auto* out = static_cast<unsigned char*>(p.out);
  if (accumulation_dtype(p.dtype) != p.dtype)
    reduce_range_widened(p, p.n % kDepth, p.first, p.first + p.count, out, nullptr, false);
  else
    reduce_range(p, p.n % kDepth, p.first, p.first + p.count, out, nullptr);
}

}  // namespace ferry::detail::shm
