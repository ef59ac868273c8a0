#include <ferry/backends/mpi/mpi_error.h>

#include <ferry/runtime/error.h>

#include <atomic>

namespace ferry::detail {
namespace {

std::atomic<bool> g_left_unfinalized{false};

}  // namespace

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return str("MPI error code ", code);
  int error_class = code;
  MPI_Error_class(code, &error_class);
  return str(std::string(text, static_cast<size_t>(length)), " (MPI error class ", error_class,
             ")");
}

void check_mpi(int code, const char* call, const std::string& where) {
  if (code == MPI_SUCCESS) [[likely]]
    return;
  throw TransportError(str("ferry: ", call, " on ", where, " failed: ", mpi_error_string(code)));
}

void mpi_leave_unfinalized() { g_left_unfinalized.store(true); }

bool mpi_usable() {
  if (g_left_unfinalized.load()) return false;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

}  // namespace ferry::detail
