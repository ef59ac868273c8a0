#include <ferry/collectives/algorithms/algorithms.h>

#include <ferry/runtime/object_pool.h>

#include <algorithm>
#include <utility>

namespace ferry::detail {

size_t Blocks::max_bytes() const {
  return bytes.empty() ? 0 : *std::max_element(bytes.begin(), bytes.end());
}

namespace {

void fill_contiguous_blocks(Blocks& b, std::span<const int64_t> rows, size_t row_bytes) {
  b.offset.clear();
  b.bytes.clear();
  b.offset.reserve(rows.size());  // one allocation per list, not one per doubling
  b.bytes.reserve(rows.size());
  size_t at = 0;
  for (int64_t r : rows) {
    b.offset.push_back(at);
    b.bytes.push_back(static_cast<size_t>(r) * row_bytes);
    at += b.bytes.back();
  }
}

// Built in place, without a list of rows first: a queued ring all_reduce or all_gather makes
// these at every call, and the rows list was one allocation more than the two it needs.
void fill_even_blocks(Blocks& b, size_t count, int parts, size_t elem_bytes) {
  b.offset.clear();
  b.bytes.clear();
  b.offset.reserve(static_cast<size_t>(parts));
  b.bytes.reserve(static_cast<size_t>(parts));
  size_t at = 0;
  for (int k = 0; k < parts; ++k) {
    const size_t rows = count / static_cast<size_t>(parts) +
                        (static_cast<size_t>(k) < count % static_cast<size_t>(parts));
    b.offset.push_back(at);
    b.bytes.push_back(rows * elem_bytes);
    at += b.bytes.back();
  }
}

}  // namespace

Blocks contiguous_blocks(const std::vector<int64_t>& rows, size_t row_bytes) {
  Blocks b;
  fill_contiguous_blocks(b, rows, row_bytes);
  return b;
}

Blocks even_blocks(size_t count, int parts, size_t elem_bytes) {
  Blocks b;
  fill_even_blocks(b, count, parts, elem_bytes);
  return b;
}

Blocks equal_blocks(int parts, size_t block_bytes) {
  return even_blocks(static_cast<size_t>(parts), parts, block_bytes);
}

SpareBlocks::SpareBlocks(size_t count, int parts, size_t elem_bytes)
    : blocks_(ThreadSpares<Blocks>::take()) {
  fill_even_blocks(blocks_, count, parts, elem_bytes);
}

SpareBlocks::SpareBlocks(std::span<const int64_t> rows, size_t row_bytes)
    : blocks_(ThreadSpares<Blocks>::take()) {
  fill_contiguous_blocks(blocks_, rows, row_bytes);
}

SpareBlocks::~SpareBlocks() {
  blocks_.offset.clear();
  blocks_.bytes.clear();
  ThreadSpares<Blocks>::give(std::move(blocks_));
}

}  // namespace ferry::detail
