// The all_reduce above the segment's slots, by single copy: a reduce-scatter in which rank r
// reads slice r of every rank's input straight out of their buffers (process_vm_readv) and
// reduces it, then an all-gather in which every rank reads the finished slices out of the
// others' outputs. Each byte crosses between processes twice, as in MPICH's one-host
// algorithms, and no rank reduces more than its 1/W. The slice is reduced in chunks that stay
// in the cache (the design guide: memcpy runs 60-140 GB/s in cache, ~20 GB/s beyond), in rank
// order, so every rank, and the direct exchange, get the same bits.
#include <ferry/collectives/shm/shm_group.h>

#include <ferry/collectives/engine/reduce_kernels.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <cstring>

namespace ferry::detail::shm {
namespace {

// Chunks of the reduction: two of them (the running sum and the next rank's piece) stay in a
// core's 2 MiB L2 with room to spare.
constexpr size_t kChunkBytes = 256 * 1024;

// The addresses a rank publishes for its large all_reduce (in its buffer of the op's first
// number).
struct LargeBuffers {
  uint64_t in;
  uint64_t out;
};

// Slice r of `count` elements among `ranks`: [first, first + size).
size_t slice_first(size_t count, int ranks, int r) {
  return count * static_cast<size_t>(r) / static_cast<size_t>(ranks);
}

}  // namespace

uint32_t GroupShm::start_large_all_reduce(const OpRef& op, const void* in, void* out,
                                          size_t count, DType dtype, ReduceOp reduce) {
  const uint32_t n = begin(op);
  const uint32_t gather = begin(op);
  sign(n, op);
  sign(gather, op);
  LargeBuffers mine{reinterpret_cast<uintptr_t>(in), reinterpret_cast<uintptr_t>(out)};
  std::memcpy(slot(rank_)->data[n % kDepth], &mine, sizeof mine);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint32_t k : {n, gather}) {
      Pending& p = push(k, k == n ? Kind::ReduceSlice : Kind::GatherSlices);
      p.out = out;
      p.count = count;
      p.dtype = dtype;
      p.reduce = reduce;
    }
  }
  arrive(gather);  // both halves: the gather waits for the slices, not for an arrival
  return gather;
}

void GroupShm::read_reduce_slice(const Pending& p) {
  const size_t elem = dtype_size(p.dtype);
  const size_t first = slice_first(p.count, size_, rank_);
  const size_t last = slice_first(p.count, size_, rank_ + 1);
  if (acc_.size() < kChunkBytes) {
    acc_.resize(kChunkBytes);
    chunk_.resize(kChunkBytes);
  }
  const size_t per_chunk = std::max<size_t>(1, kChunkBytes / elem);
  const uint32_t b = p.n % kDepth;
  auto* out = static_cast<unsigned char*>(p.out);
  for (size_t at = first; at < last; at += per_chunk) {
    const size_t elems = std::min(per_chunk, last - at);
    const size_t bytes = elems * elem, offset = at * elem;
    for (int r = 0; r < size_; ++r) {
      LargeBuffers theirs;
      std::memcpy(&theirs, slot(r)->data[b], sizeof theirs);
      // Rank 0's piece is the start of the sum, then every other rank's in rank order.
      copy_from(r, theirs.in + offset, r == 0 ? acc_.data() : chunk_.data(), bytes, p);
      if (r > 0) combine(acc_.data(), acc_.data(), chunk_.data(), elems, p.dtype, p.reduce);
    }
    // Written only now: in place, `out` is this rank's `in`, whose slice no peer reads.
    std::memcpy(out + offset, acc_.data(), bytes);
  }
}

void GroupShm::read_gather_slices(const Pending& p) {
  const size_t elem = dtype_size(p.dtype);
  const uint32_t b = (p.n - 1) % kDepth;  // the addresses are with the reduce half's number
  auto* out = static_cast<unsigned char*>(p.out);
  for (int k = 1; k < size_; ++k) {
    const int r = (rank_ + k) % size_;
    LargeBuffers theirs;
    std::memcpy(&theirs, slot(r)->data[b], sizeof theirs);
    const size_t first = slice_first(p.count, size_, r);
    const size_t last = slice_first(p.count, size_, r + 1);
    copy_from(r, theirs.out + first * elem, out + first * elem, (last - first) * elem, p);
  }
}

}  // namespace ferry::detail::shm
