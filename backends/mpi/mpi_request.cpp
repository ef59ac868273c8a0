#include "backends/mpi/mpi_request.h"

#include "backends/mpi/mpi_error.h"
#include "runtime/error.h"

#include <algorithm>
#include <atomic>
#include <thread>

namespace ferry::detail {
namespace {

constexpr auto kSpinFor = std::chrono::microseconds(20);
// MPI progresses only while it is called: a large collective needs thousands of calls, so
// sleeping between them stalls it. Yield-and-test keeps it moving while leaving the core to any
// other rank that needs it (oversubscribed runs); only a wait longer than this sleeps.
constexpr auto kYieldFor = std::chrono::milliseconds(20);
constexpr auto kFirstSleep = std::chrono::microseconds(20);
constexpr auto kLongestSleep = std::chrono::microseconds(1000);

}  // namespace

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
  if (test()) return true;
  // Callers wait in slices (to notice a poisoned group): the spin and yield phases count from
  // the first wait, so a long wait for a late peer sleeps instead of yielding every slice.
  if (first_wait_ == Clock::time_point{}) first_wait_ = Clock::now();
  const auto start = first_wait_;
  while (Clock::now() - start < kSpinFor) {
    for (int i = 0; i < 16; ++i) {
      if (test()) return true;
    }
  }
  while (Clock::now() - start < kSpinFor + kYieldFor) {
    std::this_thread::yield();
    if (test()) return true;
  }
  auto pause = std::chrono::duration_cast<Clock::duration>(
      Clock::now() - start > kSpinFor + kYieldFor + kLongestSleep ? kLongestSleep : kFirstSleep);
  for (;;) {
    const auto now = Clock::now();
    if (now >= deadline) return test();
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    if (test()) return true;
    pause = std::min<Clock::duration>(pause * 2, kLongestSleep);
  }
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
