#include <ferry/backends/mpi/mpi_types.h>

#include <ferry/runtime/error.h>

namespace ferry::detail {

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Int32: return MPI_INT32_T;
    case DType::Int64: return MPI_INT64_T;
    case DType::UInt8: return MPI_UINT8_T;
    default: break;
  }
  FERRY_THROW(Error, "mpi transport: no native reduction for dtype ", dtype_name(dtype),
              " (the engine reduces 16-bit floats in float32; internal error)");
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return MPI_SUM;
    case ReduceOp::Prod: return MPI_PROD;
    case ReduceOp::Min: return MPI_MIN;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Avg: break;
  }
  FERRY_THROW(Error, "mpi transport: avg reaches MPI only as a sum (internal error)");
}

}  // namespace ferry::detail
