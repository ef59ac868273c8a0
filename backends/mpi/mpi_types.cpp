#include <ferry/backends/mpi/mpi_types.h>

#include <ferry/backends/mpi/mpi_error.h>
#include <ferry/runtime/error.h>

#include <span>

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

// A datatype covering `bytes` bytes at the absolute address `p` (for MPI_BOTTOM): lets a call
// take separately allocated tensors without copying them into one buffer.
MPI_Datatype absolute_bytes(const void* p, size_t bytes, const std::string& where) {
  MPI_Aint address = 0;
  check_mpi(MPI_Get_address(p, &address), "MPI_Get_address", where);
  const int length = static_cast<int>(bytes);
  MPI_Datatype type = MPI_DATATYPE_NULL;
  check_mpi(MPI_Type_create_hindexed(1, &length, &address, MPI_BYTE, &type),
            "MPI_Type_create_hindexed", where);
  check_mpi(MPI_Type_commit(&type), "MPI_Type_commit", where);
  return type;
}

// The same over several spans, in order (MPI_DATATYPE_NULL when they hold no bytes).
MPI_Datatype absolute_spans(const ByteSpan* spans, size_t count, const std::string& where) {
  std::vector<int> lengths;
  std::vector<MPI_Aint> addresses;
  for (const ByteSpan& span : std::span(spans, count)) {
    if (span.bytes == 0) continue;
    MPI_Aint address = 0;
    check_mpi(MPI_Get_address(span.data, &address), "MPI_Get_address", where);
    lengths.push_back(static_cast<int>(span.bytes));
    addresses.push_back(address);
  }
  if (lengths.empty()) return MPI_DATATYPE_NULL;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  check_mpi(MPI_Type_create_hindexed(static_cast<int>(lengths.size()), lengths.data(),
                                     addresses.data(), MPI_BYTE, &type),
            "MPI_Type_create_hindexed", where);
  check_mpi(MPI_Type_commit(&type), "MPI_Type_commit", where);
  return type;
}

}  // namespace ferry::detail
