// mse_loss and binary_cross_entropy_with_logits, differentiable in input and target.
#include <ferry/autograd/ops.h>
#include <ferry/autograd/ops_detail.h>

namespace ferry {

namespace {
using Grads = std::vector<Tensor>;
using Needs = std::vector<bool>;
}  // namespace

Variable mse_loss(const Variable& input, const Variable& target, Reduction reduction) {
  constexpr const char* kOp = "mse_loss";
  Tensor y = kernels::mse_loss(detail::value_of(kOp, input, "input"),
                               detail::value_of(kOp, target, "target"), reduction);
  if (!detail::should_record({&input, &target})) return Variable(std::move(y));
  // Both gradients are +-2 (input - target) * grad: both operands are needed either way.
  detail::SavedTensor saved_input = detail::save(input);
  detail::SavedTensor saved_target = detail::save(target);
  return detail::record(kOp, {&input, &target}, std::move(y),
                        [=](const Grads& g, const Needs& needs) {
                          const Tensor d = kernels::mse_loss_backward(
                              g[0], saved_input.get(kOp), saved_target.get(kOp), reduction);
                          return Grads{needs[0] ? d : Tensor(),
                                       needs[1] ? kernels::neg(d) : Tensor()};
                        });
}

Variable binary_cross_entropy_with_logits(const Variable& input, const Variable& target,
                                          Reduction reduction) {
  constexpr const char* kOp = "binary_cross_entropy_with_logits";
  Tensor y = kernels::binary_cross_entropy_with_logits(
      detail::value_of(kOp, input, "input"), detail::value_of(kOp, target, "target"),
      reduction);
  if (!detail::should_record({&input, &target})) return Variable(std::move(y));
  // d/dx = sigmoid(x) - t needs both; d/dt = -x needs the input only.
  detail::SavedTensor saved_input = detail::save(input);
  detail::SavedTensor saved_target = detail::save_if(input.requires_grad(), target);
  return detail::record(
      kOp, {&input, &target}, std::move(y), [=](const Grads& g, const Needs& needs) {
        const Tensor& x = saved_input.get(kOp);
        Grads out = detail::tensor_list(2);
        if (needs[0]) {
          out[0] = kernels::binary_cross_entropy_with_logits_backward(
              g[0], x, saved_target.get(kOp), reduction);
        }
        if (needs[1]) {
          out[1] = kernels::binary_cross_entropy_with_logits_target_backward(g[0], x, reduction);
        }
        return out;
      });
}

}  // namespace ferry
