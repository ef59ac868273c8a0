// Elementwise reduction of two buffers, used by every reducing algorithm, and the dtype and
// division of an Avg that the reducing ops apply around them (internal).
#pragma once

#include <ferry/collectives/collectives.h>
#include <ferry/runtime/dtype.h>

#include <cstddef>

namespace ferry::detail {

// out[i] = a[i] op b[i] for i < count; out may alias a or b. `op` is never Avg here (Avg is a
// Sum followed by a division) and dtype is never a 16-bit float: those are reduced in float32
// (see accumulation_dtype).
void combine(void* out, const void* a, const void* b, size_t count, DType dtype, ReduceOp op);

// The dtype reductions of `dtype` run in: float32 for float16 and bfloat16, else dtype itself.
DType accumulation_dtype(DType dtype);

// data[i] /= divisor, for the floating dtypes (Avg).
void divide(void* data, size_t count, DType dtype, double divisor);

}  // namespace ferry::detail
