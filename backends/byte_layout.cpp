#include <ferry/backends/byte_layout.h>

#include <ferry/runtime/object_pool.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <utility>

namespace ferry {
namespace {

using detail::ByteRunsRef;

ByteRunsRef ref(const ByteLayout& l) { return ByteRunsRef{l.base, l.runs.data(), l.runs.size()}; }

// Walks a layout's blocks in order, a piece at a time.
struct Cursor : detail::RunCursor<char*> {
  explicit Cursor(const ByteRunsRef& l) : RunCursor(l.base, l.runs, l.count) {}
};

}  // namespace

size_t ByteLayout::bytes() const { return detail::bytes_of(ref(*this)); }

namespace {

char* contiguous_span(const ByteRunsRef& l) {
  const ByteRun* only = nullptr;
  for (const ByteRun& r : std::span(l.runs, l.count)) {
    if (r.count == 0 || r.block == 0) continue;
    if (only) return nullptr;
    only = &r;
  }
  if (!only) return l.base;
  return only->count == 1 || only->stride == only->block ? l.base + only->offset : nullptr;
}

// The pieces of a strided run (a column block of a row-major matrix: an embedding table's
// columns in a pooled all-to-all's output) are copied last first when they are short. Copying
// upwards, the hardware prefetcher also fetches the lines between the pieces, which nobody
// touches; downwards it does not. Measured on one core of this project's AMD EPYC host, 512 KiB
// in pieces of 256 B every 512 B: 13.3 us upwards, 10.6 downwards, as one contiguous memcpy of
// the same bytes; 2 MiB: 58 against 49. Beyond 2 MiB per run, and for pieces above 256 B, the
// order made no difference or downwards was the slower.
constexpr size_t kDescendingMaxPiece = 256;
constexpr size_t kDescendingMaxBytes = size_t{2} << 20;
// Pieces shorter than this are copied inline, 32 bytes at a time, not by a call to memcpy each:
// at 64 B pieces the calls took twice the bytes' copy (512 KiB every 128 B: 22.4 us against
// 11.1, and 10.4 for one memcpy), and downwards was faster at every size measured (up to 8 MiB).
constexpr size_t kInlineMaxPiece = 127;

// `n` bytes, n <= kInlineMaxPiece.
inline void copy_short(char* to, const char* from, size_t n) {
  size_t k = 0;
  for (; k + 32 <= n; k += 32) __builtin_memcpy(to + k, from + k, 32);
  if (k < n) std::memcpy(to + k, from + k, n - k);
}

// `count` pieces of `block` bytes, `stride` apart at `p` and packed at `span`, last first.
template <bool kIntoLayout>
void copy_pieces_downwards(char* p, char* span, size_t block, size_t stride, size_t count) {
  p += (count - 1) * stride;
  span += (count - 1) * block;
  for (size_t j = 0; j < count; ++j, p -= stride, span -= block) {
    char* to = kIntoLayout ? p : span;
    const char* from = kIntoLayout ? span : p;
    if (block <= kInlineMaxPiece) {
      copy_short(to, from, block);
    } else {
      std::memcpy(to, from, block);
    }
  }
}

// Copies between a layout and one contiguous span, a run at a time. The common shapes (a column
// block of a row-major matrix, a list of segments) have one side contiguous; this loop keeps a
// piece's address in registers, where the general walk recomputes it through the run list after
// every memcpy (which may alias it). At 128-byte pieces the walk took 2.4x a plain memcpy of the
// same bytes.
template <bool kIntoLayout>
void copy_span(const ByteRunsRef& l, char* span) {
  for (const ByteRun& r : std::span(l.runs, l.count)) {
    if (r.count == 0 || r.block == 0) continue;
    char* p = l.base + r.offset;
    if (r.count == 1 || r.stride == r.block) {
      const size_t n = r.count * r.block;
      if constexpr (kIntoLayout) std::memcpy(p, span, n);
      else std::memcpy(span, p, n);
      span += n;
      continue;
    }
    const size_t block = r.block, stride = r.stride;
    if (block <= kInlineMaxPiece ||
        (block <= kDescendingMaxPiece && r.count * block <= kDescendingMaxBytes)) {
      copy_pieces_downwards<kIntoLayout>(p, span, block, stride, r.count);
      span += r.count * block;
      continue;
    }
    for (size_t j = 0; j < r.count; ++j, p += stride, span += block) {
      if constexpr (kIntoLayout) std::memcpy(p, span, block);
      else std::memcpy(span, p, block);
    }
  }
}

}  // namespace

char* contiguous_span(const ByteLayout& l) { return contiguous_span(ref(l)); }

void copy_layout(const ByteLayout& from, const ByteLayout& to) {
  detail::copy_runs(ref(from), ref(to));
}
void pack_layout(const ByteLayout& from, char* to) { detail::pack_runs(ref(from), to); }
void unpack_layout(const char* from, const ByteLayout& to) { detail::unpack_runs(from, ref(to)); }

namespace detail {

namespace {
using ByteRunSpares = ThreadSpares<std::vector<ByteRun>, 16>;
}  // namespace

std::vector<ByteRun> spare_byte_runs() { return ByteRunSpares::take(); }

void give_byte_runs(std::vector<ByteRun>&& runs) noexcept {
  if (runs.capacity() == 0) return;
  runs.clear();
  ByteRunSpares::give(std::move(runs));
}

size_t bytes_of(const ByteRunsRef& l) {
  size_t n = 0;
  for (const ByteRun& r : std::span(l.runs, l.count)) n += r.count * r.block;
  return n;
}

void copy_runs(const ByteRunsRef& from, const ByteRunsRef& to) {
  if (char* span = contiguous_span(from)) return copy_span<true>(to, span);
  if (char* span = contiguous_span(to)) return copy_span<false>(from, span);
  Cursor s(from), d(to);
  while (!s.done() && !d.done()) {
    const size_t n = std::min(s.left_in_block(), d.left_in_block());
    std::memcpy(d.at(), s.at(), n);
    s.advance(n);
    d.advance(n);
  }
}

void pack_runs(const ByteRunsRef& from, char* to) { copy_span<false>(from, to); }

void unpack_runs(const char* from, const ByteRunsRef& to) {
  copy_span<true>(to, const_cast<char*>(from));
}

}  // namespace detail
}  // namespace ferry
