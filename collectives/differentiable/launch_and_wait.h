// The blocking form of a differentiable collective (internal): its Req/Wait op (req_wait.h)
// launched and waited for inside one tape node.
//
// Every differentiable collective is written once, as a ReqWaitOp. launch_async runs it as two
// nodes so that what is recorded between them overlaps the data's flight; the blocking form
// (differentiable.h) has nothing to overlap, so it runs the same four steps in one node:
//
//   forward   launch, wait, finish
//   backward  launch_gradient, wait, finish_gradient
//
// One node rather than a Req node and a Wait node: the op's values, gradients and node name
// are the same either way, but the pair would cost a placeholder tensor, a shared request, a
// second node and a hand-off to background progress per call, for an overlap that a blocking
// call cannot have. The op is held by value (one allocation per call, as a Function of its own
// took), and its steps are called through its final type, without virtual dispatch.
#pragma once

#include <ferry/autograd/function.h>
#include <ferry/collectives/differentiable/req_wait.h>

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace ferry::detail {

template <class Op>
class LaunchAndWait final : public Function {
  static_assert(std::is_base_of_v<ReqWaitOp, Op> && std::is_final_v<Op>,
                "LaunchAndWait runs a final ReqWaitOp");

 public:
  template <class... Args>
  explicit LaunchAndWait(Args&&... args) : op_(std::forward<Args>(args)...) {}

  std::string name() const override { return op_.name(); }
  bool is_collective() const override { return op_.gradient_communicates(); }

  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& inputs) override {
    op_.launch(inputs).wait();  // under the op's deadline; rethrows its error
    return op_.finish();
  }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& grad_outputs) override {
    op_.launch_gradient(grad_outputs).wait();
    return op_.finish_gradient();
  }

 private:
  Op op_;
};

// A step's one tensor as its list of results, moved in: a braced list would copy it (an atomic
// increment and decrement of its storage's count, twice per call and op).
inline std::vector<Tensor> only(Tensor t) {
  std::vector<Tensor> list;
  list.reserve(1);
  list.push_back(std::move(t));
  return list;
}

// Runs an `Op` built from `args` on `inputs` as one node (recorded when grad mode is on and an
// input requires grad); returns one Variable per output of its finish().
template <class Op, class... Args>
std::vector<Variable> launch_and_wait(const std::vector<Variable>& inputs, Args&&... args) {
  return ferry::apply(std::make_shared<LaunchAndWait<Op>>(std::forward<Args>(args)...), inputs);
}

}  // namespace ferry::detail
