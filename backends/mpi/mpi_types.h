// ferry's dtypes and reduce ops as MPI's (internal).
#pragma once

#include <ferry/runtime/dtype.h>
#include <ferry/runtime/reduce_op.h>

#include <mpi.h>

namespace ferry::detail {

// float32, float64, int32, int64, uint8. The 16-bit floats have no MPI type: the engine widens
// them to float32 before a reduction, and data movement sends every dtype as bytes.
MPI_Datatype mpi_datatype(DType dtype);
// Sum, Prod, Min, Max (Avg is a Sum the engine divides afterwards).
MPI_Op mpi_op(ReduceOp op);

}  // namespace ferry::detail
