// The all-to-all shape of torchrec's comm ops (internal): alltoall_pooled,
// variable_batch_alltoall_pooled, alltoall_sequence and alltoallv are each one all_to_all_single
// of a flat buffer forward and the same exchange with the block sizes swapped backward (the
// transpose of a permutation); they differ only in how their tensors are laid out into and out
// of that buffer. This class runs the exchange, the codecs and the division; an op supplies the
// four layouts.
//
// Sizes are value elements per rank: send[k] go to rank k in forward, recv[i] come from rank i.
// Both codecs' wire sizes are computed at launch, so a size a codec cannot encode fails before
// any data moves (InvalidArgument naming the op, the rank and the codec).
#pragma once

#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/comm/comm_op_base.h>

#include <memory>
#include <optional>
#include <vector>

namespace ferry::torchrec::detail {

class AllToAllCommOp : public TorchrecCommOp {
 public:
  AllToAllCommOp(const char* name, Group group, const std::optional<QuantizedCommCodecs>& codecs,
                 Division division, std::vector<int64_t> send, std::vector<int64_t> recv);
  // The sizes of both directions, immutable once made: an op called with the same sizes at
  // every step shares one instead of building its two lists per call.
  struct Splits {
    std::vector<int64_t> send, recv;
  };
  AllToAllCommOp(const char* name, Group group, const std::optional<QuantizedCommCodecs>& codecs,
                 Division division, std::shared_ptr<const Splits> splits);

  Work launch(const std::vector<Tensor>& inputs) final;
  std::vector<Tensor> finish() final;
  Work launch_gradient(const std::vector<Tensor>& grad_outputs) final;
  std::vector<Tensor> finish_gradient() final;

 protected:
  // The forward's send buffer (any shape; read flat, row-major): block k, send[k] elements,
  // goes to rank k.
  virtual Tensor forward_send(const std::vector<Tensor>& inputs) = 0;
  // The outputs from the received buffer (1-D, blocks of recv[i] elements in rank order).
  virtual std::vector<Tensor> forward_outputs(const Tensor& received) = 0;
  // The gradient's send buffer: block i, recv[i] elements, goes back to rank i. With
  // `divide`, also divided by the group size (asked only of an op whose
  // divides_in_gradient_send() is true).
  virtual Tensor gradient_send(const std::vector<Tensor>& grad_outputs, bool divide) = 0;
  // True when gradient_send copies the gradient into a new layout anyway and can divide while
  // it copies. Without a codec the division then happens on the sending rank, before the
  // exchange: the same division of the same values (the same bits) without a pass of its own.
  virtual bool divides_in_gradient_send() const { return false; }
  // The input gradients from the received gradient (1-D, blocks of send[k] elements), already
  // decoded and divided.
  virtual std::vector<Tensor> input_gradients(const Tensor& received) = 0;

  // Where the blocks lie, for an op that moves one input into one output of `output_shape`:
  // block k for rank k is read from the input through send[k], the block from rank i lands in
  // the output through recv[i] (collectives.h's layouts). An op that gives it moves its bytes
  // straight between the tensors, without a copy into or out of a wire buffer, whenever the
  // codec of that direction passes the values through; backward is the same exchange with the
  // two layouts swapped (the gradient's blocks read where the output's landed, and written
  // where the input's were read). With an encoding codec the four layouts above are used.
  struct Placement {
    std::vector<BlockLayout> send, recv;
    Shape output_shape;
  };
  // Null: the op has no placement. Shared, so that an op may hand out the same layouts to
  // every call with the same sizes instead of building its lists again.
  virtual std::shared_ptr<const Placement> placement(const std::vector<Tensor>& inputs) {
    (void)inputs;
    return nullptr;
  }
  const std::vector<int64_t>& sends() const { return splits_->send; }
  const std::vector<int64_t>& receives() const { return splits_->recv; }
  // Contiguous blocks of `sizes` elements one after the other: the layout of a flat buffer.
  static std::vector<BlockLayout> contiguous(const std::vector<int64_t>& sizes);

 private:
  Work exchange(CodecPass& pass, const Tensor& values, const std::vector<int64_t>& send_values,
                const std::vector<int64_t>& send_wire, const std::vector<int64_t>& recv_wire,
                Tensor& received);

  std::shared_ptr<const Splits> splits_;
  std::optional<CodecPass> forward_pass_, backward_pass_;
  std::vector<int64_t> forward_send_wire_, forward_recv_wire_;
  std::vector<int64_t> gradient_send_wire_, gradient_recv_wire_;
  Tensor received_;  // the wire buffer in flight (forward, then gradient)
  bool divided_before_send_ = false;  // this backward's gradient_send divided
  std::shared_ptr<const Placement> placement_;  // set when the forward moved through it
  Shape input_shape_;
  Tensor placed_;  // the output (forward) or input gradient (backward) being received into
  bool placed_gradient_ = false;  // this backward moves through placement_
};

}  // namespace ferry::torchrec::detail
