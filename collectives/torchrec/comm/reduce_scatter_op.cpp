#include <ferry/collectives/torchrec/comm/reduce_scatter_op.h>

#include <ferry/collectives/collectives.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/object_pool.h>

#include <algorithm>

namespace ferry::torchrec::detail {
namespace {

// The tensors as one flat buffer: a view of a single one, a copy of several.
Tensor flat_concat(const std::vector<Tensor>& tensors) {
  if (tensors.size() == 1) return tensors[0].flatten();
  std::vector<Tensor> flats;
  flats.reserve(tensors.size());
  for (const Tensor& t : tensors) flats.push_back(t.flatten());
  return cat(flats, 0);
}

}  // namespace

ReduceScatterGatherOp::ReduceScatterGatherOp(const char* name, Group group,
                                             const std::optional<QuantizedCommCodecs>& codecs,
                                             ForwardCollective forward, std::vector<int64_t> sizes,
                                             Shape output_shape)
    : TorchrecCommOp(name, std::move(group), codecs, Division::kTorchrec),
      forward_(forward),
      sizes_(std::move(sizes)),
      equal_(std::adjacent_find(sizes_.begin(), sizes_.end(), std::not_equal_to<>()) ==
             sizes_.end()),
      output_shape_(std::move(output_shape)),
      input_shapes_(ShapeListSpares::take()) {}

ReduceScatterGatherOp::~ReduceScatterGatherOp() {
  // The lists go to this thread's spares: the next call's (SizeListSpares) and launch's.
  sizes_.clear();
  SizeListSpares::give(std::move(sizes_));
  input_shapes_.clear();
  ShapeListSpares::give(std::move(input_shapes_));
}

Work ReduceScatterGatherOp::reduce_scatter(CodecPass& pass, const Tensor& values,
                                           const std::vector<int64_t>& wire) {
  pass.check_reducible(op_name());
  Tensor encoded = pass.encode(values);
  received_ = empty({wire[rank()]}, pass.wire_dtype());
  if (equal_) return ferry::reduce_scatter(encoded, received_, group());
  return ferry::reduce_scatter_v(encoded, received_, wire, group());
}

Work ReduceScatterGatherOp::all_gather(CodecPass& pass, const Tensor& values,
                                       const std::vector<int64_t>& wire) {
  Tensor encoded = pass.encode(values);
  received_ = peer_buffer({sum_of(wire)}, pass.wire_dtype());  // the peers write their blocks
  if (equal_) return ferry::all_gather(encoded, received_, group());
  return ferry::all_gather_v(encoded, received_, wire, group());
}

Work ReduceScatterGatherOp::launch(const std::vector<Tensor>& inputs) {
  input_shapes_.clear();
  for (const Tensor& t : inputs) input_shapes_.push_back(t.shape());
  const DType dtype = inputs[0].dtype();
  forward_pass_.emplace(forward_pass(dtype));
  backward_pass_.emplace(backward_pass(dtype));
  // Both directions' sizes (and whether their codecs can sum) before anything moves; without a
  // codec the wire sizes are the value sizes (wire_or_values).
  if (!forward_pass_->passthrough()) forward_wire_ = forward_pass_->wire_sizes(sizes_);
  if (!backward_pass_->passthrough()) backward_wire_ = backward_pass_->wire_sizes(sizes_);
  if (forward_ == ForwardCollective::kReduceScatter) {
    if (inputs.size() > 1 && forward_pass_->passthrough()) {
      // reduce_scatter_pooled without a codec: the list form reads each input where it lies
      // instead of a copy of all W put end to end (the ring, and shared memory between the
      // processes of one host; MPI's own collective, across hosts, still takes a copy).
      ferry::detail::ScopedSpare<std::vector<Tensor>> flats;  // a list of this thread's
      for (const Tensor& t : inputs) flats->push_back(t.flatten());
      received_ = empty({sizes_[rank()]}, dtype);
      return ferry::reduce_scatter(*flats, received_, group());
    }
    return reduce_scatter(*forward_pass_, flat_concat(inputs),
                          forward_pass_->wire_or_values(forward_wire_, sizes_));
  }
  backward_pass_->check_reducible(op_name());
  return all_gather(*forward_pass_, flat_concat(inputs),
                    forward_pass_->wire_or_values(forward_wire_, sizes_));
}

std::vector<Tensor> ReduceScatterGatherOp::finish() {
  Tensor values = forward_pass_->decode(received_);
  received_ = Tensor();
  return one_tensor(values.reshape(output_shape_));
}

Work ReduceScatterGatherOp::launch_gradient(const std::vector<Tensor>& grad_outputs) {
  const Tensor& g = grad_outputs[0];
  divided_before_send_ = false;
  if (forward_ == ForwardCollective::kReduceScatter) {
    // The gathered gradient is W times this rank's: without a codec, dividing this rank's
    // part before the all_gather gives the same bits with 1/W of the work. (With a codec the
    // division stays after decoding, as in the original.)
    if (backward_pass_->passthrough() && gradient_divides()) {
      const Tensor divided = divided_copy(g);  // one pass: the copy divides as it goes
      divided_before_send_ = true;
      return all_gather(*backward_pass_, divided,
                        backward_pass_->wire_or_values(backward_wire_, sizes_));
    }
    return all_gather(*backward_pass_, g, backward_pass_->wire_or_values(backward_wire_, sizes_));
  }
  // A reduce-scatter sums first: its division must follow the sum.
  return reduce_scatter(*backward_pass_, g, backward_pass_->wire_or_values(backward_wire_, sizes_));
}

std::vector<Tensor> ReduceScatterGatherOp::finish_gradient() {
  Tensor values = backward_pass_->decode(received_);
  received_ = Tensor();
  if (!divided_before_send_) divide_if_enabled(values);
  std::vector<Tensor> grads = ferry::detail::tensor_list(input_shapes_.size());
  int64_t start = 0;
  for (size_t i = 0; i < input_shapes_.size(); ++i) {
    const int64_t n = shape_numel(input_shapes_[i]);
    grads[i] = values.narrow(0, start, n).reshape(input_shapes_[i]);
    start += n;
  }
  return grads;
}

}  // namespace ferry::torchrec::detail
