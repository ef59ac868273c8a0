#include <ferry/collectives/torchrec/comm/comm_op_base.h>

#include <ferry/collectives/differentiable/checks.h>
#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/shm/shm_ops.h>
#include <ferry/collectives/torchrec/comm/comm_switches.h>
#include <ferry/runtime/error.h>


namespace ferry::torchrec::detail {

TorchrecCommOp::TorchrecCommOp(const char* name, Group group,
                               const std::optional<QuantizedCommCodecs>& codecs,
                               Division division)
    : name_(name), group_(std::move(group)), division_(division) {
  if (codecs) {
    forward_codec_ = codecs->forward;
    backward_codec_ = codecs->backward;
  }
}

std::string TorchrecCommOp::describe() const { return where(name_, group_); }

CodecPass TorchrecCommOp::forward_pass(DType dtype) const {
  // The op outlives its passes (they are its members), so `this` stays valid in `who`.
  return CodecPass(forward_codec_, dtype, [this] { return describe() + ", forward codec"; });
}

CodecPass TorchrecCommOp::backward_pass(DType dtype) const {
  return CodecPass(backward_codec_, dtype, [this] { return describe() + ", backward codec"; });
}

bool TorchrecCommOp::gradient_divides() const {
  const bool divide = captured_division_
                          ? *captured_division_
                          : division_ == Division::kTorchrec && get_gradient_division();
  return divide && world() > 1;
}

void TorchrecCommOp::divide_if_enabled(Tensor& grad) const {
  if (gradient_divides()) divide(grad);
}

void TorchrecCommOp::divide(Tensor& grad) const {
  if (grad.dtype() == DType::Float64) {
    GroupSizeDivider<double>(world()).apply(grad.data<double>(), grad.data<double>(), grad.numel());
  } else {
    GroupSizeDivider<float>(world()).apply(grad.data<float>(), grad.data<float>(), grad.numel());
  }
  grad.bump_version();
}

Tensor TorchrecCommOp::peer_buffer(Shape shape, DType dtype) const {
  return ferry::detail::shm::empty_for_peers(std::move(shape), dtype, group_.impl(), name_);
}

Tensor TorchrecCommOp::divided_copy(const Tensor& grad) const {
  Tensor out = peer_buffer(grad.shape(), grad.dtype());
  if (grad.dtype() == DType::Float64) {
    GroupSizeDivider<double>(world()).apply(grad.data<double>(), out.data<double>(), grad.numel());
  } else {
    GroupSizeDivider<float>(world()).apply(grad.data<float>(), out.data<float>(), grad.numel());
  }
  return out;
}

namespace {

// The request, or on the sync path its outputs already waited for (the division captured now).
// `sync` is read once per call: the switch is process-wide and may flip meanwhile.
Awaitable<std::vector<Variable>> run(std::shared_ptr<TorchrecCommOp> op,
                                     const std::vector<Variable>& inputs, bool sync) {
  if (!sync) return launch_async(std::move(op), inputs);
  op->capture_gradient_division(get_gradient_division());
  return NoWait<std::vector<Variable>>(launch_async(std::move(op), inputs).wait());
}

// The one output, its emptied list handed to this thread's spares (the next node's outputs):
// a list per call saved.
Variable first_of(std::vector<Variable> outputs) {
  Variable first = std::move(outputs[0]);
  outputs.clear();
  ferry::detail::VariableListSpares::give(std::move(outputs));
  return first;
}

}  // namespace

Awaitable<std::vector<Variable>> run_comm_op(std::shared_ptr<TorchrecCommOp> op,
                                             const std::vector<Variable>& inputs) {
  return run(std::move(op), inputs, get_use_sync_collectives());
}

Awaitable<Variable> run_comm_op_single(std::shared_ptr<TorchrecCommOp> op,
                                       const std::vector<Variable>& inputs) {
  if (!get_use_sync_collectives()) return launch_async_first(std::move(op), inputs);
  return NoWait<Variable>(first_of(run(std::move(op), inputs, true).wait()));
}

void check_input(const Variable& x, const Group& group, const char* op) {
  ferry::detail::check_differentiable_input(x, group, op);
}

void check_non_negative(const std::vector<int64_t>& values, std::string_view name,
                        const Group& group, const char* op) {
  for (size_t k = 0; k < values.size(); ++k) {
    FERRY_CHECK(values[k] >= 0, InvalidArgument, where(op, group), ": ", name, "[", k,
                "] must be >= 0, given ", name, " = ", list_str(values));
  }
}

void check_non_negative(const std::vector<int64_t>& values, const char* name, size_t index,
                        const Group& group, const char* op) {
  for (int64_t v : values)
    if (v < 0) check_non_negative(values, ferry::detail::str(name, "[", index, "]"), group, op);
}

void check_reducible_codec(const std::optional<QuantizedCommCodecs>& codecs, bool forward,
                           DType dtype, const Group& group, const char* op) {
  if (!codecs) return;
  const auto& codec = forward ? codecs->forward : codecs->backward;
  CodecPass(codec, dtype,
            [&] { return where(op, group) + (forward ? ", forward codec" : ", backward codec"); })
      .check_reducible(forward ? "the forward reduce-scatter" : "the gradient reduce-scatter");
}

}  // namespace ferry::torchrec::detail
