#include <ferry/collectives/algorithms/algorithms.h>

#include <ferry/collectives/engine/reduce_kernels.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace ferry::detail {
namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

// 1 MiB: half the L2 of a core here, so a segment and its reduction stay in cache.
constexpr size_t kSegmentBytes = size_t{1} << 20;

// Messages a block of `bytes` travels in: at least one, so that an empty block still matches.
size_t segment_count(size_t bytes, size_t segment) {
  return bytes == 0 ? 1 : (bytes + segment - 1) / segment;
}

}  // namespace

// Step s (0..W-2): send block r-s-1 (the input's at step 0, else the carry reduced at the
// previous step), receive block r-s-2 from the left neighbour and reduce it with our own copy
// of that block. The block received at the last step is block r: it goes to `out`.
//
// Blocks move in segments of at most kSegmentBytes, each reduced right after it arrived, while
// it is still in cache: reducing a 32 MiB block after copying all of it reads it back from
// memory.
void ring_reduce_scatter(OpContext& ctx, const char* const* in_block, char* work, char* out,
                         const Blocks& blocks, const ReduceSpec& spec) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t eb = spec.elem_bytes();
  if (n == 1) {
    if (out != in_block[0] && blocks.bytes[0] > 0) std::memcpy(out, in_block[0], blocks.bytes[0]);
    return;
  }
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  const size_t segment = kSegmentBytes / eb * eb;
  char* tmp = ctx.scratch(0, std::min(blocks.max_bytes(), segment));
  // Without a work buffer, partial reductions live in a scratch carry. One suffices: each
  // segment waits for its send to finish before the carry is overwritten.
  char* carry = work == nullptr ? ctx.scratch(1, blocks.max_bytes()) : nullptr;
  const char* sending = in_block[mod(r - 1, n)];
  for (int s = 0; s < n - 1; ++s) {
    const int sb = mod(r - s - 1, n), rb = mod(r - s - 2, n);
    char* dst;
    if (s == n - 2) {
      dst = out;
    } else if (work != nullptr) {
      dst = work + blocks.offset[rb];
    } else {
      dst = carry;
    }
    // Both neighbours cut a block into the same segments: the sender's block sb is the
    // receiver's block rb. Our own sb and rb may differ in size (uneven blocks), so the two
    // directions may have different segment counts; an empty block is one empty message.
    const size_t send_bytes = blocks.bytes[sb], recv_bytes = blocks.bytes[rb];
    const size_t sends = segment_count(send_bytes, segment);
    const size_t recvs = segment_count(recv_bytes, segment);
    for (size_t k = 0; k < std::max(sends, recvs); ++k) {
      const size_t at = k * segment;
      if (k < sends) ctx.send(right, s, sending + at, std::min(segment, send_bytes - at));
      const size_t len = k < recvs ? std::min(segment, recv_bytes - at) : 0;
      if (k < recvs) ctx.recv(left, s, tmp, len);
      ctx.wait_all();
      if (len > 0) combine(dst + at, in_block[rb] + at, tmp, len / eb, spec.dtype, spec.op);
    }
    if (s == n - 2 && work != nullptr && work + blocks.offset[rb] != out)
      std::memcpy(work + blocks.offset[rb], out, recv_bytes);
    sending = dst;
  }
}

void ring_reduce_scatter(OpContext& ctx, const char* in, char* work, char* out,
                         const Blocks& blocks, const ReduceSpec& spec) {
  // On the stack for the usual group sizes: this runs for every small reduce-scatter.
  const size_t n = blocks.offset.size();
  std::array<const char*, 64> few;
  std::vector<const char*> many(n > few.size() ? n : 0);
  const char** in_block = many.empty() ? few.data() : many.data();
  for (size_t k = 0; k < n; ++k) in_block[k] = in + blocks.offset[k];
  ring_reduce_scatter(ctx, in_block, work, out, blocks, spec);
}

// Step s: send block r-s (which we hold complete) right, receive block r-s-1 from the left.
void ring_all_gather(OpContext& ctx, char* buf, const Blocks& blocks, const char* own) {
  const int n = ctx.size(), r = ctx.rank();
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  char* own_place = buf + blocks.offset[r];
  if (own == nullptr) own = own_place;
  for (int s = 0; s < n - 1; ++s) {
    const int sb = mod(r - s, n), rb = mod(r - s - 1, n);
    ctx.send(right, s, s == 0 ? own : buf + blocks.offset[sb], blocks.bytes[sb]);
    ctx.recv(left, s, buf + blocks.offset[rb], blocks.bytes[rb]);
    // Only step 0 sends our block, so it may land in place while that step runs.
    if (s == 0 && own != own_place && blocks.bytes[r] > 0)
      std::memcpy(own_place, own, blocks.bytes[r]);
    ctx.wait_all();
  }
  if (n == 1 && own != own_place && blocks.bytes[r] > 0)
    std::memcpy(own_place, own, blocks.bytes[r]);
}

void ring_all_reduce(OpContext& ctx, const char* in, char* out, size_t count,
                     const ReduceSpec& spec) {
  const int n = ctx.size(), r = ctx.rank();
  const SpareBlocks spare(count, n, spec.elem_bytes());
  const Blocks& blocks = spare.get();
  if (n == 1) {
    if (out != in) std::memcpy(out, in, count * spec.elem_bytes());
    return;
  }
  // `out` is the work buffer: blocks reduced on the way are written there, so `in` stays intact
  // and no extra copy of the payload is made.
  ring_reduce_scatter(ctx, in, out, out + blocks.offset[r], blocks, spec);
  ctx.next_phase();
  ring_all_gather(ctx, out, blocks);
}

}  // namespace ferry::detail
