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

#include "collectives/engine.h"

#include <optional>

namespace ferry::detail {

// Holds the group's issue lock while an op is started at issue; empty when it cannot be (no
// native collectives, or the worker still has ops of this group to start first).
class NativeIssue {
 public:
  NativeIssue(const Group& group, const char* op);
  explicit operator bool() const { return lock_.owns_lock(); }
  NativeCollectives& native() { return *group_->native(); }
  // Starts the op and wraps the request (or the error starting it threw) into the op's Work,
  // whose outputs() are `outputs`; `keep` are the other tensors the request uses.
  Work finish(OpSummary what, std::vector<Tensor> outputs, std::vector<Tensor> keep,
              const std::function<std::unique_ptr<NativeRequest>(NativeCollectives&)>& start);

 private:
  const Group& handle_;
  GroupImpl* group_;
  const char* op_;
  std::unique_lock<std::mutex> lock_;
};

// Starts the op at issue if it can; std::nullopt tells the caller to submit() it instead.
template <class Start>
std::optional<Work> start_native_now(const Group& group, const char* op, OpSummary what,
                                     std::vector<Tensor> outputs, std::vector<Tensor> keep,
                                     Start&& start) {
  NativeIssue issue(group, op);
  if (!issue) return std::nullopt;
  return issue.finish(std::move(what), std::move(outputs), std::move(keep),
                      std::forward<Start>(start));
}

}  // namespace ferry::detail
