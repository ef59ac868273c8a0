// The reduce-scatter / all-gather shape of torchrec's comm ops (internal): the reduce_scatter_*
// ops reduce-scatter forward and all-gather their gradients; all_gather_base_pooled is the
// transpose. One class runs both directions, the codecs and the division.
//
// Everything is flat: the inputs (one tensor, or reduce_scatter_pooled's W tensors) are read as
// one row-major buffer cut into per-rank blocks of sizes[r] elements. Reduce-scatter forward:
// rank r receives the sum of every rank's block r, shaped `output_shape`. All-gather forward:
// rank r's input is block r of everybody's output, `output_shape`. The gradient is cut back
// into the inputs' shapes. Equal sizes use the equal-block primitives (reduce_scatter,
// all_gather), unequal ones the _v forms, as the original picks its torch.distributed calls.
#pragma once

#include <ferry/collectives/torchrec/comm/comm_op_base.h>
#include <ferry/runtime/object_pool.h>

#include <optional>
#include <vector>

namespace ferry::torchrec::detail {

enum class ForwardCollective { kReduceScatter, kAllGather };

// The per-call lists of the ops below, handed from one call on a thread to the next: the op
// gives its block sizes and its inputs' shapes back when it goes, and a call builds its sizes
// in a list taken here, so that a steady state allocates none of them.
using SizeListSpares = ferry::detail::ThreadSpares<std::vector<int64_t>>;
using ShapeListSpares = ferry::detail::ThreadSpares<std::vector<Shape>>;

class ReduceScatterGatherOp final : public TorchrecCommOp {
 public:
  ReduceScatterGatherOp(const char* name, Group group,
                        const std::optional<QuantizedCommCodecs>& codecs,
                        ForwardCollective forward, std::vector<int64_t> sizes,
                        Shape output_shape);
  ~ReduceScatterGatherOp() override;

  Work launch(const std::vector<Tensor>& inputs) override;
  std::vector<Tensor> finish() override;
  Work launch_gradient(const std::vector<Tensor>& grad_outputs) override;
  std::vector<Tensor> finish_gradient() override;

 private:
  // Reduce-scatter of `values` (all blocks) or all-gather of `values` (this rank's block),
  // encoded by `pass`, into received_.
  Work reduce_scatter(CodecPass& pass, const Tensor& values, const std::vector<int64_t>& wire);
  Work all_gather(CodecPass& pass, const Tensor& values, const std::vector<int64_t>& wire);

  ForwardCollective forward_;
  std::vector<int64_t> sizes_;
  bool equal_;
  Shape output_shape_;
  std::vector<Shape> input_shapes_;
  std::optional<CodecPass> forward_pass_, backward_pass_;
  std::vector<int64_t> forward_wire_, backward_wire_;
  Tensor received_;
  bool divided_before_send_ = false;  // this backward divided before its all_gather
};

}  // namespace ferry::torchrec::detail
