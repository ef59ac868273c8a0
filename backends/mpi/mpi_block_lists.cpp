#include <ferry/backends/mpi/mpi_block_lists.h>

#include <ferry/backends/mpi/mpi_error.h>
#include <ferry/backends/mpi/mpi_types.h>
#include <ferry/runtime/error.h>

#include <climits>
#include <string>

namespace ferry::detail {

int fit_mpi_int(size_t n, const char* op, const char* unit) {
  FERRY_CHECK(n <= static_cast<size_t>(INT_MAX), InvalidArgument, op, " on the mpi transport: ",
              "at most 2^31-1 ", unit, " per block, given ", n);
  return static_cast<int>(n);
}

bool displacements_from_lowest(const std::vector<void*>& bufs, const std::vector<size_t>& bytes,
                               std::vector<int>& counts, std::vector<int>& displs, char*& base,
                               const char* op) {
  base = nullptr;
  for (size_t k = 0; k < bufs.size(); ++k) {
    counts[k] = fit_mpi_int(bytes[k], op, "bytes");
    char* p = static_cast<char*>(bufs[k]);
    if (bytes[k] > 0 && (base == nullptr || p < base)) base = p;
  }
  for (size_t k = 0; k < bufs.size(); ++k) {
    if (bytes[k] == 0) continue;
    const size_t d = static_cast<size_t>(static_cast<char*>(bufs[k]) - base);
    if (d > static_cast<size_t>(INT_MAX)) return false;
    displs[k] = static_cast<int>(d);
  }
  return true;
}

void start_lists_by_address(MpiPending& pending, MPI_Comm comm, int size,
                            const std::vector<const void*>& send,
                            const std::vector<size_t>& send_bytes, const std::vector<void*>& recv,
                            const std::vector<size_t>& recv_bytes, const char* op) {
  const size_t n = static_cast<size_t>(size);
  std::vector<int>& sc = pending.ints(n);
  std::vector<int>& rc = pending.ints(n);
  std::vector<int>& zeros = pending.ints(n);
  // Datatypes and count arrays must stay untouched until the request finishes: they live (and
  // the datatypes are freed) with it.
  std::vector<MPI_Datatype>& st = pending.datatypes(n, MPI_BYTE);
  std::vector<MPI_Datatype>& rt = pending.datatypes(n, MPI_BYTE);
  const std::string where = pending.describe();
  for (size_t k = 0; k < n; ++k) {
    fit_mpi_int(send_bytes[k], op, "bytes");
    fit_mpi_int(recv_bytes[k], op, "bytes");
    if (send_bytes[k] > 0) {
      st[k] = absolute_bytes(send[k], send_bytes[k], where);
      sc[k] = 1;
    }
    if (recv_bytes[k] > 0) {
      rt[k] = absolute_bytes(recv[k], recv_bytes[k], where);
      rc[k] = 1;
    }
  }
  const int code = MPI_Ialltoallw(MPI_BOTTOM, sc.data(), zeros.data(), st.data(), MPI_BOTTOM,
                                  rc.data(), zeros.data(), rt.data(), comm, pending.handle());
  if (code != MPI_SUCCESS) check_mpi(code, "MPI_Ialltoallw", where);  // named on failure only
}

}  // namespace ferry::detail
