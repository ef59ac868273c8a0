#include <ferry/collectives/differentiable/req_wait.h>

#include <ferry/autograd/function.h>
#include <ferry/autograd/grad_mode.h>
#include <ferry/autograd/node.h>
#include <ferry/autograd/ops_detail.h>
#include <ferry/collectives/differentiable/stage_bits.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/object_pool.h>
#include <ferry/runtime/small_vector.h>

#include <array>
#include <cstddef>
#include <iterator>
#include <mutex>

namespace ferry {
namespace detail {

// The state one request's nodes share: the op, the Works in flight and how far it went. The
// stage's `completed` bits are set by the callbacks of whoever completes the collectives, which
// may run after the request is gone (stage_bits.h).
class ReqWaitCore {
 public:
  explicit ReqWaitCore(std::shared_ptr<ReqWaitOp> op) : op_(std::move(op)) {}

  const ReqWaitOp& op() const { return *op_; }

  // Req, forward.
  void launch(const std::vector<Tensor>& inputs) {
    num_inputs_ = inputs.size();
    forward_ = op_->launch(inputs);
    stage_.set(StageBits::kLaunched);
    forward_.progress_in_background(
        [ticket = stage_.ticket()] { ticket.set(StageBits::kCompleted); });
  }

  // Wait, forward.
  std::vector<Tensor> wait() {
    FERRY_CHECK(!forward_done_, InvalidArgument, op_->describe(),
                ": the request can no longer be waited for: a backward already ran its Req node "
                "and gave its outputs up (wait for a request before the backward of a loss "
                "recorded after it)");
    std::vector<Tensor> outputs = complete_forward();
    stage_.set(StageBits::kWaited);
    return outputs;
  }

  // Wait, backward.
  void launch_gradient(const std::vector<Tensor>& grad_outputs) {
    FERRY_CHECK(!gradient_in_flight_, InvalidArgument, op_->describe(),
                ": a second gradient collective launched before the first was waited for");
    // A backward under retain_graph launches again: a late callback of the previous gradient
    // collective must not mark this one completed (its ticket is renewed away).
    stage_.renew(StageBits::kGradientCompleted);
    gradient_ = op_->launch_gradient(grad_outputs);
    gradient_in_flight_ = true;
    stage_.set(StageBits::kGradientLaunched);
    gradient_.progress_in_background(
        [ticket = stage_.ticket()] { ticket.set(StageBits::kGradientCompleted); });
  }

  // The backward of a request whose outputs nobody received (dropped, or its Wait node not in
  // this backward): the gradient collective still runs, on zeros, so the peers get this
  // rank's part.
  void launch_zero_gradient() {
    if (!forward_done_) complete_forward();
    std::vector<Tensor> zero_grads;
    for (const Output& o : outputs_)
      zero_grads.push_back(o.defined ? zeros(o.shape, o.dtype) : Tensor());
    launch_gradient(zero_grads);
  }

  // Req, backward.
  std::vector<Tensor> wait_gradient() {
    if (!gradient_in_flight_) launch_zero_gradient();
    gradient_.wait();
    gradient_ = Work();
    gradient_in_flight_ = false;
    stage_.set(StageBits::kGradientCompleted);
    std::vector<Tensor> grads = op_->finish_gradient();
    FERRY_CHECK(grads.size() == num_inputs_, InvalidArgument, op_->describe(),
                ": finish_gradient returned ", grads.size(), " gradients for ", num_inputs_,
                " inputs");
    stage_.set(StageBits::kGradientWaited);
    return grads;
  }

  bool gradient_started_or_done() const {
    return gradient_in_flight_ || stage_.has(StageBits::kGradientWaited);
  }

  ReqWaitStage stage() const {
    ReqWaitStage s;
    s.launched = stage_.has(StageBits::kLaunched);
    s.completed = stage_.has(StageBits::kCompleted);
    s.waited = stage_.has(StageBits::kWaited);
    s.gradient_launched = stage_.has(StageBits::kGradientLaunched);
    s.gradient_completed = stage_.has(StageBits::kGradientCompleted);
    s.gradient_waited = stage_.has(StageBits::kGradientWaited);
    return s;
  }

 private:
  // What a zero gradient of each output looks like.
  struct Output {
    bool defined = false;
    Shape shape;
    DType dtype = DType::Float32;
  };

  std::vector<Tensor> complete_forward() {
    forward_.wait();  // under the op's deadline; rethrows its error
    forward_ = Work();
    stage_.set(StageBits::kCompleted);
    std::vector<Tensor> outputs = op_->finish();
    forward_done_ = true;
    outputs_.clear();
    for (const Tensor& t : outputs) {
      outputs_.push_back(t.defined() ? Output{true, t.shape(), t.dtype()} : Output{});
    }
    return outputs;
  }

  std::shared_ptr<ReqWaitOp> op_;
  StageBits stage_;
  size_t num_inputs_ = 0;
  Work forward_;
  bool forward_done_ = false;
  SmallVector<Output, 2> outputs_;  // inline: a list per request cost an allocation
  Work gradient_;
  bool gradient_in_flight_ = false;
};

ReqWaitStage stage_of(const ReqWaitCore& core) { return core.stage(); }

}  // namespace detail

namespace {

using detail::ReqWaitCore;

// The nodes of a request: each runs one step of the shared core, and every one is a collective
// node when the op's gradient communicates (a rank whose loss ignores the outputs still runs it).
class RequestNode : public Function {
 public:
  RequestNode(std::shared_ptr<ReqWaitCore> core, DType dtype, const char* suffix)
      : core_(std::move(core)), dtype_(dtype), suffix_(suffix) {}
  // Built on first use, then kept: the tape asks for it several times per recorded node, and
  // a call that records nothing never asks (two allocations per node saved on that path).
  std::string name() const override {
    std::call_once(named_, [this] { name_ = core_->op().name() + suffix_; });
    return name_;
  }
  bool is_collective() const override { return core_->op().gradient_communicates(); }

 protected:
  // The placeholder linking the Req node to the nodes that consume it: one element of a
  // floating dtype, so that it can carry a (meaningless) gradient back to the Req node. One
  // per dtype and thread, shared by every request: nothing writes a placeholder (its value is
  // never read, and the tape sums gradients out of place), so none is allocated per call.
  Tensor placeholder() const {
    static thread_local std::array<Tensor, std::size(kAllDTypes)> kept;
    Tensor& t = kept[static_cast<size_t>(dtype_)];
    if (!t.defined()) t = zeros({1}, dtype_);
    return t;
  }
  // The placeholder (or nothing) as a node's one result, in a list from this thread's spares:
  // the tape hands such lists back, so a call allocates none.
  std::vector<Tensor> placeholder_list(bool with_placeholder) const {
    std::vector<Tensor> out = detail::tensor_list(1);
    if (with_placeholder) out[0] = placeholder();
    return out;
  }

  std::shared_ptr<ReqWaitCore> core_;

 private:
  DType dtype_;
  const char* suffix_;
  mutable std::once_flag named_;
  mutable std::string name_;
};

class ReqFunction final : public RequestNode {
 public:
  ReqFunction(std::shared_ptr<ReqWaitCore> core, DType dtype)
      : RequestNode(std::move(core), dtype, "_req") {}

  std::vector<Tensor> forward(Context& ctx, const std::vector<Tensor>& inputs) override {
    core_->launch(inputs);
    // The placeholder links this node to the Wait node on the tape; a call that records
    // nothing has no tape to link, so it goes without (a tensor's allocations per call).
    bool recorded = false;
    for (size_t i = 0; i < ctx.num_inputs() && !recorded; ++i) recorded = ctx.needs_input_grad(i);
    return placeholder_list(recorded);
  }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>&) override {
    return core_->wait_gradient();
  }
};

class WaitFunction final : public RequestNode {
 public:
  WaitFunction(std::shared_ptr<ReqWaitCore> core, DType dtype)
      : RequestNode(std::move(core), dtype, "_wait") {}

  std::vector<Tensor> forward(Context&, const std::vector<Tensor>&) override {
    return core_->wait();
  }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& grad_outputs) override {
    core_->launch_gradient(grad_outputs);
    return placeholder_list(true);
  }
};

// Recorded where a request was dropped unwaited: in backward it launches the gradient
// collective (of zeros) in the place a Wait node would have, and the Req node waits for it.
class DroppedWaitFunction final : public RequestNode {
 public:
  DroppedWaitFunction(std::shared_ptr<ReqWaitCore> core, DType dtype)
      : RequestNode(std::move(core), dtype, "_dropped_wait") {}

  // The forward collective finishes in the background (or in backward): nothing to wait for.
  std::vector<Tensor> forward(Context&, const std::vector<Tensor>&) override {
    return placeholder_list(true);
  }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>&) override {
    core_->launch_zero_gradient();
    return placeholder_list(true);
  }
};

// What the Awaitable of a request holds (its shared state holds the handle itself: one
// block per request): its wait, and what to do when it is dropped unwaited. Moved only into
// that state; a moved-from handle has no placeholder and does nothing when destroyed.
class RequestHandle {
 public:
  RequestHandle(std::shared_ptr<ReqWaitCore> core, Variable placeholder, DType dtype)
      : core_(std::move(core)), placeholder_(std::move(placeholder)), dtype_(dtype) {}
  RequestHandle(RequestHandle&&) = default;
  RequestHandle& operator=(RequestHandle&&) = delete;

  const std::shared_ptr<ReqWaitCore>& core() const { return core_; }

  std::vector<Variable> wait() {
    FERRY_CHECK(!waited_, InvalidArgument, core_->op().describe(),
                ": this request was waited for already; a request is waited for once (its "
                "wait records the node that completes the collective), so keep the outputs of "
                "the first wait");
    std::vector<Variable> outputs;
    if (!placeholder_.defined()) {
      outputs = unrecorded_wait();
    } else {
      detail::ScopedSpare<std::vector<Variable>> inputs;  // the thread's list: none allocated
      inputs->push_back(placeholder_);
      outputs = ferry::apply(detail::make_pooled<WaitFunction>(core_, dtype_), *inputs);
    }
    waited_ = true;
    placeholder_ = Variable();
    return outputs;
  }

  ~RequestHandle() {
    // Unwaited and recorded: the peers will run this request's gradient collective, so this
    // rank must too. Not when its Req node already ran a backward (it launched one itself).
    // (An unrecorded request has an undefined placeholder.)
    if (waited_ || !placeholder_.defined() || !placeholder_.requires_grad() ||
        core_->gradient_started_or_done())
      return;
    try {
      EnableGradGuard recording;  // the drop may happen inside a NoGradGuard
      Variable dropped =
          ferry::apply(detail::make_pooled<DroppedWaitFunction>(core_, dtype_), {placeholder_})[0];
      detail::keep_until_backward(dropped.impl()->producer);
    } catch (...) {
      // Out of memory at most; a destructor cannot report it, and the peers then time out.
    }
  }

 private:
  // The wait of a request whose Req node was not recorded: its Wait node would record nothing
  // either (its one input, the placeholder, is undefined), so the wait is run as apply() runs
  // an unrecorded node, without the node: the outputs as variables that require no grad.
  std::vector<Variable> unrecorded_wait() {
    std::vector<Tensor> values;
    {
      NoGradGuard no_grad;
      values = core_->wait();
    }
    return detail::plain_variables(std::move(values));
  }

  std::shared_ptr<ReqWaitCore> core_;
  Variable placeholder_;
  DType dtype_;
  bool waited_ = false;
};

// The awaitables' waits: every output, or the one output of a one-output op (its emptied
// list handed back to the thread's spares).
struct AllOutputs {
  RequestHandle handle;
  std::vector<Variable> operator()() { return handle.wait(); }
};
struct FirstOutput {
  RequestHandle handle;
  Variable operator()() {
    std::vector<Variable> outputs = handle.wait();
    Variable first = std::move(outputs.at(0));
    outputs.clear();
    detail::VariableListSpares::give(std::move(outputs));
    return first;
  }
};

DType placeholder_dtype(const std::vector<Variable>& inputs) {
  for (const Variable& v : inputs) {
    if (v.defined() && is_floating(v.dtype())) return v.dtype();
  }
  return DType::Float32;
}

// Runs the Req step and returns the handle. A launch that records nothing (no input requires
// grad, or grad mode is off) calls the op as apply() would call the Req node, without the node:
// its placeholder would be undefined anyway.
RequestHandle launch_handle(std::shared_ptr<ReqWaitOp> op, const std::vector<Variable>& inputs) {
  FERRY_CHECK(op != nullptr, InvalidArgument, "launch_async: the op is null");
  // The request's objects come from the thread's pools (object_pool.h): a call makes and drops
  // the same few every time.
  auto core = detail::make_pooled<ReqWaitCore>(std::move(op));
  const DType dtype = placeholder_dtype(inputs);
  if (!detail::should_record(inputs)) {
    detail::ScopedSpare<std::vector<Tensor>> values;
    values->reserve(inputs.size());
    for (const Variable& v : inputs) values->push_back(v.defined() ? v.value() : Tensor());
    NoGradGuard no_grad;
    core->launch(*values);
    return RequestHandle(std::move(core), Variable(), dtype);
  }
  Variable req = detail::apply_first(detail::make_pooled<ReqFunction>(core, dtype), inputs);
  return RequestHandle(std::move(core), std::move(req), dtype);
}

}  // namespace

AsyncRequest<std::vector<Variable>> launch_async(std::shared_ptr<ReqWaitOp> op,
                                                 const std::vector<Variable>& inputs) {
  RequestHandle handle = launch_handle(std::move(op), inputs);
  std::shared_ptr<ReqWaitCore> core = handle.core();
  return AsyncRequest<std::vector<Variable>>(
      Awaitable<std::vector<Variable>>(AllOutputs{std::move(handle)}), std::move(core));
}

AsyncRequest<Variable> launch_async_first(std::shared_ptr<ReqWaitOp> op,
                                          const std::vector<Variable>& inputs) {
  RequestHandle handle = launch_handle(std::move(op), inputs);
  std::shared_ptr<ReqWaitCore> core = handle.core();
  return AsyncRequest<Variable>(Awaitable<Variable>(FirstOutput{std::move(handle)}),
                                std::move(core));
}

}  // namespace ferry
