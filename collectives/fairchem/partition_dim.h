// The dim check shared by fairchem's partition helpers and regions (internal: not installed).
#pragma once

#include "runtime/tensor.h"

#include <cstdint>

namespace ferry::fairchem {

// `dim` in [-rank, rank) made non-negative. Otherwise InvalidArgument naming `op`, the rank when
// `rank >= 0`, the dim and the shape. A 0-d shape has no valid dim.
int64_t normalize_partition_dim(const char* op, int64_t dim, const Shape& shape, int rank = -1);

}  // namespace ferry::fairchem
