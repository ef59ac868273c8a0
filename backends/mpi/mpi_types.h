// ferry's dtypes and reduce ops as MPI's, and byte datatypes over absolute addresses, which let
// one MPI call take separately allocated buffers (internal).
#pragma once

#include <ferry/backends/native_collectives.h>
#include <ferry/runtime/dtype.h>
#include <ferry/runtime/reduce_op.h>

#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

namespace ferry::detail {

// float32, float64, int32, int64, uint8. The 16-bit floats have no MPI type: the engine widens
// them to float32 before a reduction, and data movement sends every dtype as bytes.
MPI_Datatype mpi_datatype(DType dtype);
// Sum, Prod, Min, Max (Avg is a Sum the engine divides afterwards).
MPI_Op mpi_op(ReduceOp op);

// A committed datatype covering `bytes` bytes at the absolute address `p` (for MPI_BOTTOM): lets
// a call take separately allocated tensors without copying them into one buffer. `where` names
// the call in errors.
MPI_Datatype absolute_bytes(const void* p, size_t bytes, const std::string& where);
// The same over several spans, in order (MPI_DATATYPE_NULL when they hold no bytes).
MPI_Datatype absolute_spans(const ByteSpan* spans, size_t count, const std::string& where);

}  // namespace ferry::detail
