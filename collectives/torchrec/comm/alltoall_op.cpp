#include <ferry/collectives/torchrec/comm/alltoall_op.h>

#include <ferry/autograd/ops_detail.h>
#include <ferry/collectives/collectives.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/object_pool.h>

#include <utility>

namespace ferry::torchrec::detail {
namespace {

DType value_dtype_of(const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors)
    if (t.defined()) return t.dtype();
  return DType::Float32;
}

}  // namespace

AllToAllCommOp::AllToAllCommOp(const char* name, Group group,
                               const std::optional<QuantizedCommCodecs>& codecs,
                               Division division, std::vector<int64_t> send,
                               std::vector<int64_t> recv)
    : AllToAllCommOp(name, std::move(group), codecs, division,
                     ferry::detail::make_pooled<Splits>(
                         Splits{std::move(send), std::move(recv)})) {}

AllToAllCommOp::AllToAllCommOp(const char* name, Group group,
                               const std::optional<QuantizedCommCodecs>& codecs,
                               Division division, std::shared_ptr<const Splits> splits)
    : TorchrecCommOp(name, std::move(group), codecs, division), splits_(std::move(splits)) {}

Work AllToAllCommOp::exchange(CodecPass& pass, const Tensor& values,
                              const std::vector<int64_t>& send_values,
                              const std::vector<int64_t>& send_wire,
                              const std::vector<int64_t>& recv_wire, Tensor& received) {
  // The layouts are the ops' and their sizes were checked against the inputs: a mismatch
  // here is a bug in an op, reported rather than sent.
  FERRY_CHECK(values.numel() == sum_of(send_values), InvalidArgument, describe(),
              ": internal: the send buffer holds ", values.numel(), " elements, the splits ",
              list_str(send_values), " add up to ", sum_of(send_values));
  Tensor wire = pass.encode(values);
  FERRY_CHECK(wire.numel() == sum_of(send_wire), InvalidArgument, describe(),
              ": internal: the encoded send buffer holds ", wire.numel(),
              " elements, the wire splits ", list_str(send_wire), " add up to ",
              sum_of(send_wire));
  received = peer_buffer({sum_of(recv_wire)}, pass.wire_dtype());  // the peers write into it
  return ferry::all_to_all_single(wire, received, recv_wire, send_wire, group());
}

Work AllToAllCommOp::launch(const std::vector<Tensor>& inputs) {
  const DType dtype = value_dtype_of(inputs);
  forward_pass_.emplace(forward_pass(dtype));
  backward_pass_.emplace(backward_pass(dtype));
  // Every size either codec will see, before anything is encoded or sent. Without a codec the
  // wire sizes are the value sizes, used as they are (wire_or_values): no lists per call.
  if (!forward_pass_->passthrough()) {
    forward_send_wire_ = forward_pass_->wire_sizes(sends());
    forward_recv_wire_ = forward_pass_->wire_sizes(receives());
  }
  if (!backward_pass_->passthrough()) {
    gradient_send_wire_ = backward_pass_->wire_sizes(receives());
    gradient_recv_wire_ = backward_pass_->wire_sizes(sends());
  }
  if (forward_pass_->passthrough()) placement_ = placement(inputs);
  if (placement_) {
    input_shape_ = inputs[0].shape();
    placed_ = peer_buffer(placement_->output_shape, dtype);
    return ferry::all_to_all_single(inputs[0], placement_->send, placed_, placement_->recv,
                                    group());
  }
  return exchange(*forward_pass_, forward_send(inputs), sends(),
                  forward_pass_->wire_or_values(forward_send_wire_, sends()),
                  forward_pass_->wire_or_values(forward_recv_wire_, receives()), received_);
}

std::vector<Tensor> AllToAllCommOp::finish() {
  if (placement_) {
    std::vector<Tensor> out = ferry::detail::tensor_list(1);  // no list allocated per call
    out[0] = std::exchange(placed_, Tensor());
    return out;
  }
  Tensor values = forward_pass_->decode(received_);
  received_ = Tensor();
  return forward_outputs(values);
}

Work AllToAllCommOp::launch_gradient(const std::vector<Tensor>& grad_outputs) {
  // With a codec the division stays after decoding, as in the original: dividing before
  // encoding would change what is quantized. Without one, an op that can divide while it lays
  // out its send buffer does so (one pass over the gradient) rather than send through its
  // placement and divide what arrived (two passes); dividing on the sending rank gives the
  // same bits, since each value is divided alike wherever that happens.
  divided_before_send_ =
      divides_in_gradient_send() && backward_pass_->passthrough() && gradient_divides();
  placed_gradient_ = placement_ && backward_pass_->passthrough() && !divided_before_send_;
  if (placed_gradient_) {
    placed_ = peer_buffer(input_shape_, grad_outputs[0].dtype());
    return ferry::all_to_all_single(grad_outputs[0], placement_->recv, placed_,
                                    placement_->send, group());
  }
  return exchange(*backward_pass_, gradient_send(grad_outputs, divided_before_send_), receives(),
                  backward_pass_->wire_or_values(gradient_send_wire_, receives()),
                  backward_pass_->wire_or_values(gradient_recv_wire_, sends()), received_);
}

std::vector<Tensor> AllToAllCommOp::finish_gradient() {
  if (placed_gradient_) {
    std::vector<Tensor> out = ferry::detail::tensor_list(1);
    out[0] = std::exchange(placed_, Tensor());
    divide_if_enabled(out[0]);
    return out;
  }
  Tensor values = backward_pass_->decode(received_);
  received_ = Tensor();
  if (!divided_before_send_) divide_if_enabled(values);
  return input_gradients(values);
}

std::vector<BlockLayout> AllToAllCommOp::contiguous(const std::vector<int64_t>& sizes) {
  std::vector<BlockLayout> layouts;
  layouts.reserve(sizes.size());
  int64_t offset = 0;
  for (int64_t n : sizes) {
    layouts.push_back({StridedRun{offset, 1, n, 0}});
    offset += n;
  }
  return layouts;
}

}  // namespace ferry::torchrec::detail
