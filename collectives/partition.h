// The canonical partition of one axis across the ranks of a graph-parallel group, and fairchem's
// pad / trim helpers (spec §1.3-1.5), without fairchem's global group.
//
// Generation followed: G2/G3 (numpy array_split rule), any dim, negative dims allowed. Where
// fairchem reads the GP world size from its globals, ferry takes `parts` explicitly.
//
// Departures from fairchem, on purpose:
//  - pad_tensor fills the padding with ZEROS; G1-G3 leave it uninitialised (garbage that no
//    correct caller ever reads, but that makes results depend on memory contents).
//  - trim_tensor returns the trimmed tensor and the adjusted sizes instead of decrementing the
//    caller's sizes in place, and works along any dim (G1-G3: dims 0 and 1 only).
//  - Bad arguments (dim out of range, a target smaller than the current size, parts < 1, a sizes
//    list that would go negative) raise InvalidArgument instead of a shape/allocation error.
#pragma once

#include "runtime/tensor.h"

#include <cstdint>
#include <vector>

namespace ferry {

// array_split rule: q = n / parts, m = n % parts; part k has q + 1 elements for k < m, else q.
// Always exactly `parts` entries, possibly zeros (n = 1, parts = 3 -> [1, 0, 0]).
// n >= 0 and parts >= 1, else InvalidArgument.
std::vector<int64_t> canonical_partition(int64_t n, int parts);

// Offset of part `part` (0 <= part < parts): the sum of the parts before it.
int64_t partition_start(int64_t n, int parts, int part);

// `t` extended along `dim` to `target_size` with zeros. Returns `t` itself (no copy, the same
// storage) when t.size(dim) == target_size; a target smaller than t.size(dim) is an
// InvalidArgument.
Tensor pad_tensor(const Tensor& t, int64_t dim, int64_t target_size);
// fairchem's pad_tensor(t, dim) without a target: pad to the next multiple of `parts`.
Tensor pad_tensor_to_multiple(const Tensor& t, int parts, int64_t dim = -1);

struct TrimmedTensor {
  Tensor tensor;
  std::vector<int64_t> sizes;
};

// Drops the last t.size(dim) % parts entries along `dim` and, when `sizes` is not empty,
// subtracts the same amount from its last entry. Nothing to drop: {t, sizes} unchanged (t
// itself). Along dim 0 the trimmed tensor is a view of t; along other dims a copy.
TrimmedTensor trim_tensor(const Tensor& t, int parts, std::vector<int64_t> sizes = {},
                          int64_t dim = 0);

namespace detail {
// `dim` in [-rank, rank) made non-negative. Otherwise InvalidArgument naming `op`, the rank when
// `rank >= 0`, the dim and the shape. A 0-d shape has no valid dim.
int64_t normalize_partition_dim(const char* op, int64_t dim, const Shape& shape, int rank = -1);
}  // namespace detail

}  // namespace ferry
