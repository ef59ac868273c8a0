// What every torchrec comm op shares (internal, not installed): its name and rank in messages,
// its codecs, the gradient-division rule, the path the switches select (asynchronous request,
// or sync collectives), and the argument checks. Each op is one ReqWaitOp
// (collectives/differentiable/req_wait.h) derived from TorchrecCommOp, most of them through
// the two collective shapes of alltoall_op.h and reduce_scatter_op.h.
#pragma once

#include <ferry/autograd/ops_detail.h>
#include <ferry/autograd/variable.h>
#include <ferry/collectives/differentiable/req_wait.h>
#include <ferry/collectives/group.h>
#include <ferry/collectives/torchrec/comm/codec_pass.h>
#include <ferry/collectives/torchrec/comm/qcomm_codec.h>
#include <ferry/collectives/torchrec/utils/format.h>
#include <ferry/runtime/awaitable.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::torchrec::detail {

// One tensor as an op's list of outputs or gradients, the list from this thread's spares: the
// tape hands such lists back, so a call allocates none for it.
inline std::vector<Tensor> one_tensor(Tensor t) {
  std::vector<Tensor> out = ferry::detail::tensor_list(1);
  out[0] = std::move(t);
  return out;
}

// Division by the group size as torchrec's grad.div_(W), bit for bit. For a power-of-two W the
// product with 1/W (exact) is the same float as the quotient (both are the correctly rounded
// x * 2^-k, subnormals, zeros, infinities and NaNs included) and runs at memory speed; the
// quotient itself, one divps per 4 floats on baseline x86-64, cost as much as the all-to-all of
// the same bytes (ferry-bench --op alltoall_pooled --sizes 1M). Other sizes divide.
template <typename T>
class GroupSizeDivider {
 public:
  explicit GroupSizeDivider(int group_size)
      : by_(static_cast<T>(group_size)),
        inverse_(T{1} / static_cast<T>(group_size)),
        power_of_two_(group_size > 0 && (group_size & (group_size - 1)) == 0) {}
  // to[i] = from[i] / group_size for i < n (from == to allowed).
  void apply(const T* from, T* to, int64_t n) const {
    if (power_of_two_) {
      for (int64_t i = 0; i < n; ++i) to[i] = from[i] * inverse_;
    } else {
      for (int64_t i = 0; i < n; ++i) to[i] = from[i] / by_;
    }
  }

 private:
  T by_, inverse_;
  bool power_of_two_;
};

// When a backward divides its gradient by the group size.
enum class Division {
  kTorchrec,  // the rule of every op but alltoallv: the switch at backward (async path)
  kNever,     // alltoallv's asynchronous backward, which ignores the switch
};

class TorchrecCommOp : public ReqWaitOp {
 public:
  TorchrecCommOp(const char* name, Group group, const std::optional<QuantizedCommCodecs>& codecs,
                 Division division);

  std::string name() const override { return name_; }
  // The same without building a string (for messages that may never be written).
  const char* op_name() const { return name_; }
  std::string describe() const override;

  // The sync path: the backward divides when `on` (the switch as the forward saw it), whatever
  // the op's asynchronous rule (torchrec's sync alltoallv divides too).
  void capture_gradient_division(bool on) { captured_division_ = on; }

 protected:
  const Group& group() const { return group_; }
  int rank() const { return group_.rank(); }
  int world() const { return group_.size(); }
  // A codec pass for this op's forward / gradient collective on values of `dtype`.
  CodecPass forward_pass(DType dtype) const;
  CodecPass backward_pass(DType dtype) const;
  // True when this backward divides its gradient by the group size (the rule above, read now).
  bool gradient_divides() const;
  // Divides `grad` (float32 / float64, decoded) in place by the group size when this backward
  // divides (after decoding, as the original).
  void divide_if_enabled(Tensor& grad) const;
  // Divides `grad` in place by the group size.
  void divide(Tensor& grad) const;
  // A new tensor holding `grad` divided by the group size: the copy and the division in one
  // pass (float32 / float64, the same bits as a copy divided in place). In peer_buffer's memory:
  // it is what the gradient's collective sends.
  Tensor divided_copy(const Tensor& grad) const;
  // An uninitialised buffer this op's collective sends from or receives into, which its peers
  // read or write (shm::empty_for_peers: in shared memory where the group's ranks share a host
  // and it is above the slots).
  Tensor peer_buffer(Shape shape, DType dtype) const;

 private:
  const char* name_;
  Group group_;
  std::shared_ptr<QuantizedCommCodec> forward_codec_;   // null: no codec
  std::shared_ptr<QuantizedCommCodec> backward_codec_;
  Division division_;
  std::optional<bool> captured_division_;  // set on the sync path
};

// Runs `op` on `inputs` on the path the switches select: sync collectives -> launched, waited
// at once, NoWait of the outputs (the division captured now); otherwise the request, waited
// by the caller. Group size 1 is handled by the ops before (no node at all).
Awaitable<std::vector<Variable>> run_comm_op(std::shared_ptr<TorchrecCommOp> op,
                                             const std::vector<Variable>& inputs);
// The same for a one-output op.
Awaitable<Variable> run_comm_op_single(std::shared_ptr<TorchrecCommOp> op,
                                       const std::vector<Variable>& inputs);

// ---- argument checks: InvalidArgument naming the op, the rank and the values ----

// In the raw collectives' words: "<op> on rank R of group G (size W): <expected>, given
// <given>" (where(op, group); the lists by list_str, utils/format.h). The group, input, rows,
// dtype and per-rank size checks are the differentiable collectives' (differentiable/checks.h),
// which phrase them through the engine's Validator.

// A valid group and a defined float32 / float64 input.
void check_input(const Variable& x, const Group& group, const char* op);
// `values` has one entry per rank, each >= 0: the raw collectives' own check of split sizes.
using ferry::detail::check_per_rank;
// Every entry of `values` is >= 0.
void check_non_negative(const std::vector<int64_t>& values, std::string_view name,
                        const Group& group, const char* op);
// The same for list `index` of a list of lists, named "name[index]" (formatted only if it fails).
void check_non_negative(const std::vector<int64_t>& values, const char* name, size_t index,
                        const Group& group, const char* op);
// The codec of a collective that sums can sum its wire dtype (codec_pass.h).
void check_reducible_codec(const std::optional<QuantizedCommCodecs>& codecs, bool forward,
                           DType dtype, const Group& group, const char* op);

}  // namespace ferry::torchrec::detail
