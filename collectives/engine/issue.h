// The one way into the engine (internal): an op is a value, issue() takes it.
//
// An Op says what it is (its name and summary, for messages and the fingerprint), how its
// transport can start it natively if the transport has its own collectives (MPI), how its
// algorithm posts it in one round if it has such a form, and its run-to-completion body. issue()
// checks the group's poison, takes the group's next sequence number under its issue lock (so
// every rank runs its ops in its own issue order whichever way each took, and two threads
// issuing on one group never swap numbers) and decides:
//   - start now, on the issuing thread, when the group's worker has nothing queued or running
//     and the op can start as it is here (its one-round post when the table chose a path that
//     posts, else its native start on a transport with its own collectives): the data moves
//     while the caller does other work,
//     nothing is handed between threads, and the Work (in_flight_work.h) finishes the op when
//     tested or waited for. A queue and a hand-off cost more than an 8 B op itself;
//   - queue it on the group's worker otherwise (queued_work.h), which runs the body, or a thread
//     that waits for it does.
// FERRY_CHECK=1 compares every op's fingerprint with the peers' before it starts, which only
// the worker's path does: nothing starts at issue then.
#pragma once

#include <ferry/collectives/engine/in_flight_work.h>
#include <ferry/collectives/engine/op_body.h>
#include <ferry/collectives/engine/op_context.h>
#include <ferry/collectives/engine/op_description.h>
#include <ferry/collectives/group.h>
#include <ferry/runtime/work.h>

#include <array>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace ferry::detail {

// A callable borrowed for the length of a call, without the allocation a std::function may
// make: an op's starts run inside issue(), before the call that built them returns.
template <class Signature>
class FunctionRef;
template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  FunctionRef() = default;
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f)  // NOLINT: implicit, as a lambda is passed where one is expected
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* obj, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(obj))(std::forward<Args>(args)...);
        }) {}
  explicit operator bool() const { return call_ != nullptr; }
  R operator()(Args... args) const { return call_(obj_, std::forward<Args>(args)...); }

 private:
  void* obj_ = nullptr;
  R (*call_)(void*, Args...) = nullptr;
};

using NativeStart = FunctionRef<std::unique_ptr<NativeRequest>(NativeCollectives&)>;
using OnePost = FunctionRef<std::unique_ptr<InFlight>(std::unique_ptr<OpContext>)>;

// `start` when `when` (the table chose the transport's own collective and the buffers can be
// used as they are), else none.
template <class F>
NativeStart native_start_if(bool when, F& start) {
  return when ? NativeStart(start) : NativeStart();
}

struct Op {
  const char* name = "";
  OpSummary what{};
  // Starts the transport's own collective on the buffers as they are; empty when the op cannot
  // start that way (no such call, or its buffers need preparing: 16-bit widening, Avg). Used
  // only on a transport with its own collectives. InvalidArgument from it refuses the call
  // before anything started: it takes no sequence number and leaves the group usable.
  NativeStart native_start{};
  // Starts the op at once over the context (whose ownership it takes): every message posted,
  // or its part published in the group's shared memory, and returns what is then in flight.
  // Set only when the table chose a path that starts this way (the direct exchange, the
  // pairwise all-to-all, shm); it is then used on any transport, before native_start.
  OnePost post{};
  // The tensors a start or post reads or writes, kept alive until the op finished.
  std::array<const Tensor*, kMaxKeptBuffers> keep{};
  // Builds the run-to-completion body; called only when the op is queued, so that an op
  // started at issue does not pay for it.
  FunctionRef<OpBody()> body{};
};

// Validation comes first (validator.h): a rejected call takes no sequence number. Throws at
// once if the group is poisoned. Any later failure fails the Work and poisons the group (the
// ranks can no longer be assumed to be in step).
Work issue(const Group& group, const Op& op);

}  // namespace ferry::detail
