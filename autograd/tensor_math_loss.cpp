// mse_loss and binary_cross_entropy_with_logits with their input and target gradients.
#include <ferry/autograd/tensor_math.h>
#include <ferry/autograd/tensor_math_detail.h>

#include <cmath>

namespace ferry::kernels {

namespace {

using detail::flat;

Tensor reduce_loss(const Tensor& elementwise, Reduction reduction) {
  switch (reduction) {
    case Reduction::None: return elementwise;
    case Reduction::Sum: return sum(elementwise);
    case Reduction::Mean: return mean(elementwise);
  }
  return elementwise;  // unreachable: every enumerator is handled above
}

// Shared backward of a loss: out = local * grad, where local is the derivative of one element's
// loss (an Eigen expression over the elements) and grad is the loss's gradient, elementwise for
// None and one value for Sum and Mean. Mean then divides by the element count, as torch does.
template <class T, class Local>
void scale_by_loss_grad(const char* op, Tensor& out, const Tensor& grad, Reduction reduction,
                        const Local& local) {
  if (reduction == Reduction::None) {
    FERRY_CHECK(grad.shape() == out.shape(), InvalidArgument, op, ": with reduction none the "
                "gradient must have the input's shape ", shape_str(out.shape()),
                " but has shape ", shape_str(grad.shape()));
    flat<T>(out) = local * flat<T>(grad);
    return;
  }
  FERRY_CHECK(grad.dim() == 0, InvalidArgument, op, ": with reduction ",
              reduction_name(reduction), " the gradient must be 0-d but has shape ",
              shape_str(grad.shape()));
  flat<T>(out) = local * *grad.data<T>();
  if (reduction == Reduction::Mean) flat<T>(out) /= static_cast<T>(out.numel());
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  detail::check_same_shape("mse_loss", input, target, "input", "target");
  Tensor squared = empty(input.shape(), input.dtype());
  detail::visit_float("mse_loss", input.dtype(), [&]<class T>() {
    flat<T>(squared) = (flat<T>(input) - flat<T>(target)).square();
  });
  return reduce_loss(squared, reduction);
}

Tensor mse_loss_backward(const Tensor& grad, const Tensor& input, const Tensor& target,
                         Reduction reduction) {
  detail::check_same_shape("mse_loss", input, target, "input", "target");
  detail::check_same_float("mse_loss", grad, input);
  Tensor out = empty(input.shape(), input.dtype());
  detail::visit_float("mse_loss", input.dtype(), [&]<class T>() {
    scale_by_loss_grad<T>("mse_loss", out, grad, reduction,
                          T(2) * (flat<T>(input) - flat<T>(target)));
  });
  return out;
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        Reduction reduction) {
  constexpr const char* kOp = "binary_cross_entropy_with_logits";
  detail::check_same_shape(kOp, input, target, "input", "target");
  Tensor loss = empty(input.shape(), input.dtype());
  detail::visit_float(kOp, input.dtype(), [&]<class T>() {
    const auto x = flat<T>(input);
    // log(1 + exp(-|x|)) never overflows, and max(x, 0) carries the large-|x| part exactly.
    flat<T>(loss) = x.max(T(0)) - x * flat<T>(target) + (-x.abs()).exp().log1p();
  });
  return reduce_loss(loss, reduction);
}

Tensor binary_cross_entropy_with_logits_backward(const Tensor& grad, const Tensor& input,
                                                 const Tensor& target, Reduction reduction) {
  constexpr const char* kOp = "binary_cross_entropy_with_logits";
  detail::check_same_shape(kOp, input, target, "input", "target");
  detail::check_same_float(kOp, grad, input);
  Tensor out = empty(input.shape(), input.dtype());
  detail::visit_float(kOp, input.dtype(), [&]<class T>() {
    const auto x = flat<T>(input);
    scale_by_loss_grad<T>(kOp, out, grad, reduction,
                          T(1) / (T(1) + (-x).exp()) - flat<T>(target));
  });
  return out;
}

Tensor binary_cross_entropy_with_logits_target_backward(const Tensor& grad, const Tensor& input,
                                                        Reduction reduction) {
  constexpr const char* kOp = "binary_cross_entropy_with_logits";
  detail::check_same_float(kOp, grad, input);
  Tensor out = empty(input.shape(), input.dtype());
  detail::visit_float(kOp, input.dtype(), [&]<class T>() {
    scale_by_loss_grad<T>(kOp, out, grad, reduction, -flat<T>(input));
  });
  return out;
}

}  // namespace ferry::kernels
