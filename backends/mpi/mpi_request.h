// One MPI request (internal); waited for as mpi_wait.h describes.
#pragma once

#include <ferry/backends/transport.h>

#include <mpi.h>

#include <list>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ferry::detail {

class MpiPending {
 public:
  // `describe` names the request in errors ("send to rank 1 ...").
  // `on_status` (optional) inspects a receive's status and returns its error, if any.
  explicit MpiPending(std::string describe,
                      std::function<std::exception_ptr(const MPI_Status&)> on_status = nullptr)
      : describe_(std::move(describe)), on_status_(std::move(on_status)) {}
  // A collective: named "<op> on group <id>" when a message needs it (formatting the name for
  // every collective would cost an allocation each). `op` must outlive the request (a literal).
  MpiPending(const char* op, uint32_t group_id) : op_(op), group_id_(group_id) {}
  ~MpiPending();  // frees the datatypes below (when MPI is still usable)
  MpiPending(const MpiPending&) = delete;
  MpiPending& operator=(const MpiPending&) = delete;

  // The handle to pass to the MPI call that starts the request.
  MPI_Request* handle() { return &request_; }
  // When the starting call failed: the request is finished with that error.
  void fail_start(std::exception_ptr error);

  bool test();  // thread-safe; never blocks
  bool wait_until(Clock::time_point deadline);
  void rethrow_if_failed();
  std::string describe() const;

  // Storage MPI reads until the request finishes (count and displacement arrays of the
  // v-collectives must stay untouched until then).
  std::vector<int>& ints(size_t n) {
    arrays_.emplace_back(n, 0);
    return arrays_.back();
  }
  // Datatype arrays likewise; committed types put here are freed with the request.
  std::vector<MPI_Datatype>& datatypes(size_t n, MPI_Datatype fill) {
    types_.emplace_back(n, fill);
    return types_.back();
  }

 private:
  std::mutex mu_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool done_ = false;
  Clock::time_point first_wait_{};  // the first wait_until, for its spin and yield phases
  std::exception_ptr error_;
  std::string describe_;
  const char* op_ = nullptr;  // set for collectives, which describe themselves lazily
  uint32_t group_id_ = 0;
  std::function<std::exception_ptr(const MPI_Status&)> on_status_;
  // Lists: references stay valid as they grow, and an empty one allocates nothing (most
  // requests never use them).
  std::list<std::vector<int>> arrays_;
  std::list<std::vector<MPI_Datatype>> types_;
};

// Keeps requests (and whatever they own) that can never be completed or freed (a collective
// that timed out, a send MPI could not cancel) until the process ends.
void keep_forever(std::shared_ptr<void> anything);
// True once anything was kept forever: MPI_Finalize could wait on it, so ferry skips it.
bool anything_kept_forever();

}  // namespace ferry::detail
