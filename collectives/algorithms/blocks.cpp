#include <ferry/collectives/algorithms/algorithms.h>

#include <algorithm>

namespace ferry::detail {

size_t Blocks::max_bytes() const {
  return bytes.empty() ? 0 : *std::max_element(bytes.begin(), bytes.end());
}

Blocks contiguous_blocks(const std::vector<int64_t>& rows, size_t row_bytes) {
  Blocks b;
  b.offset.reserve(rows.size());  // one allocation per list, not one per doubling
  b.bytes.reserve(rows.size());
  size_t at = 0;
  for (int64_t r : rows) {
    b.offset.push_back(at);
    b.bytes.push_back(static_cast<size_t>(r) * row_bytes);
    at += b.bytes.back();
  }
  return b;
}

Blocks even_blocks(size_t count, int parts, size_t elem_bytes) {
  std::vector<int64_t> rows(parts);
  for (int k = 0; k < parts; ++k)
    rows[k] = static_cast<int64_t>(count / parts + (static_cast<size_t>(k) < count % parts));
  return contiguous_blocks(rows, elem_bytes);
}

}  // namespace ferry::detail
