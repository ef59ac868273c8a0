// What the fairchem family's files share (internal: not installed).
#pragma once

#include <ferry/runtime/tensor.h>

#include <cstdint>

namespace ferry::fairchem {

// `dim` in [-rank, rank) made non-negative. Otherwise InvalidArgument naming `op`, the rank when
// `rank >= 0`, the dim and the shape. A 0-d shape has no valid dim.
int64_t normalize_partition_dim(const char* op, int64_t dim, const Shape& shape, int rank = -1);

// The default layout's GP size (gp_utils.cpp), or InvalidArgument naming `op` when none is set
// up: what pad_tensor and trim_tensor divide by when not told.
int default_gp_world_size(const char* op);

}  // namespace ferry::fairchem
