// Native collectives started when they are issued (internal).
//
// A transport with its own collectives (MPI) progresses them only inside its own calls, so
// handing each op to the group's worker thread buys nothing and costs two thread hand-offs and
// the engine's per-op machinery, more than a small MPI collective. When the group's worker has
// nothing queued or running, an op whose buffers need no preparation (no 16-bit widening, no
// Avg, no aliasing) therefore starts its MPI call on the issuing thread, in sequence order, and
// its Work polls the request: a wait on it runs under the same deadline, diagnosis and
// poisoning as the worker's path (OpContext::wait_native). Otherwise the op is queued as
// before; the worker being idle on every rank is not required, because each rank starts its
// own ops in its own issue order either way.
#pragma once

#include <ferry/collectives/engine/engine.h>

#include <array>
#include <exception>
#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

namespace ferry::detail {

// The memory of the tensors a request started at issue reads or writes (at most an input and
// an output), kept alive until it finished. Held inline and without Tensor handles, whose
// copies allocate: that would cost a small op more than its MPI call.
using KeptBuffers = std::array<std::shared_ptr<const void>, 2>;

// Holds the group's issue lock while an op is started at issue; empty when it cannot be (no
// native collectives, or the worker still has ops of this group to start first).
class NativeIssue {
 public:
  NativeIssue(const Group& group, const char* op);
  explicit operator bool() const { return lock_.owns_lock(); }
  NativeCollectives& native() { return *group_->native(); }
  // Wraps the started request, or the error starting it threw, into the op's Work; `keep` is
  // the memory the request reads or writes, kept alive until it finished.
  Work finish(OpSummary what, KeptBuffers keep, std::unique_ptr<NativeRequest> request,
              std::exception_ptr start_error);

 private:
  const Group& handle_;
  GroupImpl* group_;
  const char* op_;
  std::unique_lock<std::mutex> lock_;
};

// Starts the op at issue if it can; std::nullopt tells the caller to submit() it instead.
// `keep` points at the tensors the request uses (copied into the Work once, as handles).
template <class Start>
std::optional<Work> start_native_now(const Group& group, const char* op, OpSummary what,
                                     std::initializer_list<const Tensor*> keep, Start&& start) {
  NativeIssue issue(group, op);
  if (!issue) return std::nullopt;
  std::unique_ptr<NativeRequest> request;
  std::exception_ptr start_error;
  try {
    request = start(issue.native());
  } catch (const InvalidArgument&) {
    // Refused before anything started (a block too large for MPI's int counts): like any
    // rejected call it takes no sequence number and leaves the group usable.
    throw;
  } catch (...) {
    start_error = std::current_exception();
  }
  KeptBuffers kept;
  size_t k = 0;
  for (const Tensor* t : keep) kept.at(k++) = t->keep_alive();
  return issue.finish(std::move(what), std::move(kept), std::move(request), start_error);
}

}  // namespace ferry::detail
