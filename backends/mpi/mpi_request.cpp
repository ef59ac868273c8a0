#include <ferry/backends/mpi/mpi_request.h>

#include <ferry/backends/mpi/mpi_error.h>
#include <ferry/backends/mpi/mpi_exchange.h>
#include <ferry/backends/mpi/mpi_wait.h>
#include <ferry/runtime/error.h>

#include <atomic>

namespace ferry::detail {

MpiPending::~MpiPending() {
  if (!mpi_usable()) return;
  for (auto& types : types_)
    for (MPI_Datatype& t : types)
      if (t != MPI_BYTE && t != MPI_DATATYPE_NULL) MPI_Type_free(&t);
}

void MpiPending::fail_start(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mu_);
  error_ = std::move(error);
  done_ = true;
}

bool MpiPending::test() {
  advance_exchange_rounds();  // MPI progresses every request here; ferry's rounds too
  std::lock_guard<std::mutex> lock(mu_);
  if (done_) return true;
  if (!mpi_usable()) {  // MPI_Test after MPI_Finalize is an error MPI cannot even report
    error_ = std::make_exception_ptr(TransportError(
        str("ferry: ", describe(), " was still pending when MPI was finalized")));
    done_ = true;
    return true;
  }
  int flag = 0;
  MPI_Status status;
  const int code = MPI_Test(&request_, &flag, &status);
  if (code != MPI_SUCCESS) {
    // MPI_Test reports a failed request through its return code; the request is finished.
    error_ = std::make_exception_ptr(TransportError(
        str("ferry: ", describe(), " failed in MPI: ", mpi_error_string(code))));
    if (on_status_) {
      status.MPI_ERROR = code;
      if (std::exception_ptr e = on_status_(status)) error_ = e;
    }
    done_ = true;
    return true;
  }
  if (!flag) return false;
  if (on_status_) {
    status.MPI_ERROR = MPI_SUCCESS;  // single-request calls leave the field undefined
    error_ = on_status_(status);
  }
  done_ = true;
  return true;
}

std::string MpiPending::describe() const {
  return op_ != nullptr ? str(op_, " on group ", group_id_) : describe_;
}

bool MpiPending::wait_until(Clock::time_point deadline) {
  return wait_polling_mpi([this] { return test(); }, first_wait_, deadline);
}

void MpiPending::rethrow_if_failed() {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
}

namespace {
std::atomic<bool> g_kept{false};
}  // namespace

bool anything_kept_forever() { return g_kept.load(); }

void keep_forever(std::shared_ptr<void> anything) {
  g_kept.store(true);
  static std::mutex mu;
  static auto* kept = new std::vector<std::shared_ptr<void>>();  // never destroyed, on purpose
  std::lock_guard<std::mutex> lock(mu);
  kept->push_back(std::move(anything));
}

}  // namespace ferry::detail
