// Asynchronous differentiable collectives: torchrec's Req/Wait pattern on ferry's tape.
//
// Every differentiable collective is one ReqWaitOp (below). Its blocking form
// (differentiable.h) launches and completes it inside one tape node, so nothing overlaps it.
// Here it is split in two nodes:
//
//   forward   Req node  launches the collective and returns at once (its one output is a
//                       1-element placeholder that links the two nodes on the tape);
//             ...       whatever the caller records meanwhile runs while the data moves;
//             Wait node (AsyncRequest::wait) completes it and returns the real outputs.
//   backward  Wait node launches the gradient collective and returns at once;
//             ...       the nodes recorded between Req and Wait run while it is in flight;
//             Req node  completes it and returns the input gradients.
//
// While a collective is in flight and nobody waits for it, something keeps it moving
// (Work::progress_in_background: its group's worker for a collective, the process's progress
// thread otherwise), so both this rank's data and its peers' arrive meanwhile.
//
// An op supplies the four steps as a ReqWaitOp; launch_async records the Req node and returns
// the request. The op object is what the steps share (torchrec's Request: the op info, the
// receive buffers, a codec context); the request holds the Works and the placeholder.
//
// Contract (every rank of the op's group):
//  - Launch the requests of a group in the same order on every rank, and wait for each request
//    once (a second wait throws InvalidArgument). Requests may be waited in any order.
//  - Both nodes are collective nodes (unless the op's gradient does not communicate): a rank
//    whose loss ignores the outputs still runs them in backward (with zero gradients), as for
//    the blocking ops, provided the loss was recorded after the Wait.
//  - A request dropped before its wait (every copy destroyed while recording) still completes:
//    its forward collective moves on in the background, and a Wait node recorded at the drop
//    launches its gradient collective (of zero gradients) in backward, so the peers do not hang.
//    For the gradient collectives to be issued in the same order on every rank, drop a request
//    where the peers wait for theirs.
//  - Failures are the Works': wait() and backward rethrow the collective's error (TimeoutError
//    at its deadline, PeerFailure, MismatchError); bad arguments throw InvalidArgument from the
//    launch, before any data moves, and record nothing.
//  - Not thread-safe: launch, wait and backward on the thread that owns the tape.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/runtime/awaitable.h>
#include <ferry/runtime/work.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ferry {

// The four steps of one asynchronous differentiable collective, called in the order below
// (launch and finish once; the gradient pair once per backward, more than once only under
// retain_graph). The Works they return are the collectives' handles.
class ReqWaitOp {
 public:
  virtual ~ReqWaitOp() = default;
  // The op's name in tape nodes ("all_to_all_single": nodes all_to_all_single_req / _wait).
  virtual std::string name() const = 0;
  // The op and rank in error messages ("all_to_all_single on rank 1 of group 0 (size 2)").
  virtual std::string describe() const = 0;

  // Req, forward: encodes, allocates the receive buffers and starts the collective on
  // `inputs` (the inputs' values). Returns at once.
  virtual Work launch(const std::vector<Tensor>& inputs) = 0;
  // Wait, forward, once the launched Work completed: decodes and returns the outputs.
  virtual std::vector<Tensor> finish() = 0;
  // Wait, backward: starts the gradient collective on one gradient per output (zeros for
  // outputs that received none). Returns at once.
  virtual Work launch_gradient(const std::vector<Tensor>& grad_outputs) = 0;
  // Req, backward, once the gradient Work completed: one gradient per input of launch
  // (undefined: none), each of its input's shape and dtype.
  virtual std::vector<Tensor> finish_gradient() = 0;
  // Whether the gradient step communicates. When it does (the usual case), the op's nodes run
  // in every backward, with zero gradients on a rank whose loss ignores the outputs, so that
  // the peers are not left waiting; an op whose gradient is computed locally (a replicated
  // adjoint) says false, and its nodes run only where a gradient reaches them.
  virtual bool gradient_communicates() const { return true; }
};

// How far a request went. `completed` flags are set by whoever saw the collective finish: a
// wait, or the progress thread while nobody waited.
struct ReqWaitStage {
  bool launched = false;            // Req forward ran: the collective is in flight
  bool completed = false;           // the forward collective finished
  bool waited = false;              // Wait forward ran
  bool gradient_launched = false;   // Wait backward ran (or the Req's, for a dropped request)
  bool gradient_completed = false;  // the gradient collective finished
  bool gradient_waited = false;     // Req backward ran
};

namespace detail {
class ReqWaitCore;
ReqWaitStage stage_of(const ReqWaitCore& core);
}  // namespace detail

// A launched request: an Awaitable whose wait() records the Wait node and returns the outputs
// (through the callbacks). Copies share the request.
template <class T>
class AsyncRequest : public Awaitable<T> {
 public:
  AsyncRequest() = default;
  AsyncRequest(Awaitable<T> awaitable, std::shared_ptr<detail::ReqWaitCore> core)
      : Awaitable<T>(std::move(awaitable)), core_(std::move(core)) {}

  // Reads the flags only: never waits, tests or moves anything.
  ReqWaitStage stage() const { return core_ ? detail::stage_of(*core_) : ReqWaitStage{}; }

  // The same request with its value passed through `fn` after this one's callbacks (the one
  // output of a one-output op, say).
  template <class U>
  AsyncRequest<U> transform(std::function<U(T)> fn) const {
    Awaitable<T> inner = *this;
    return AsyncRequest<U>(
        Awaitable<U>([inner, fn = std::move(fn)]() mutable { return fn(inner.wait()); }), core_);
  }

 private:
  std::shared_ptr<detail::ReqWaitCore> core_;
};

// Runs `op`'s launch on `inputs` as a Req node (recorded when grad mode is on and an input
// requires grad) and returns the request; wait() gives one Variable per output of finish().
// Undefined inputs are passed as undefined tensors.
AsyncRequest<std::vector<Variable>> launch_async(std::shared_ptr<ReqWaitOp> op,
                                                 const std::vector<Variable>& inputs);

// launch_async for an op with one output: wait() gives that output (as transform would, in one
// shared state instead of two).
AsyncRequest<Variable> launch_async_first(std::shared_ptr<ReqWaitOp> op,
                                          const std::vector<Variable>& inputs);

}  // namespace ferry
