// relu, sigmoid, tanh, exp, log, softmax and log_softmax.
#include <ferry/autograd/ops.h>
#include <ferry/autograd/ops_detail.h>

namespace ferry {

namespace {

using Grads = std::vector<Tensor>;
using Needs = std::vector<bool>;

// Records an activation whose backward is backward(grad, saved), with `saved` either the
// input or the output, whichever the derivative is cheaper from.
Variable record_activation(const char* op, const Variable& x, Tensor y,
                           detail::SavedTensor saved, Tensor (*backward)(const Tensor&,
                                                                         const Tensor&)) {
  return detail::record(op, {&x}, std::move(y),
                        [op, saved, backward](const Grads& g, const Needs&) {
                          return Grads{backward(g[0], saved.get(op))};
                        });
}

// An activation whose derivative is a function of its output (relu, sigmoid, tanh, exp and
// the softmaxes): the node keeps the output, not the input.
Variable output_saving(const char* op, const Variable& x, Tensor (*forward)(const Tensor&),
                       Tensor (*backward)(const Tensor&, const Tensor&)) {
  Tensor y = forward(detail::value_of(op, x, "x"));
  if (!detail::should_record({&x})) return Variable(std::move(y));
  detail::SavedTensor saved = detail::save_output(op, y);
  return record_activation(op, x, std::move(y), std::move(saved), backward);
}

Tensor exp_backward(const Tensor& grad, const Tensor& y) { return kernels::mul(grad, y); }

}  // namespace

// relu's output is positive exactly where its input is, so relu_backward takes either.
Variable relu(const Variable& x) {
  return output_saving("relu", x, kernels::relu, kernels::relu_backward);
}
Variable sigmoid(const Variable& x) {
  return output_saving("sigmoid", x, kernels::sigmoid, kernels::sigmoid_backward);
}
Variable tanh(const Variable& x) {
  return output_saving("tanh", x, kernels::tanh, kernels::tanh_backward);
}
Variable exp(const Variable& x) { return output_saving("exp", x, kernels::exp, exp_backward); }
Variable softmax(const Variable& x) {
  return output_saving("softmax", x, kernels::softmax, kernels::softmax_backward);
}
Variable log_softmax(const Variable& x) {
  return output_saving("log_softmax", x, kernels::log_softmax, kernels::log_softmax_backward);
}

Variable log(const Variable& x) {
  Tensor y = kernels::log(detail::value_of("log", x, "x"));
  if (!detail::should_record({&x})) return Variable(std::move(y));
  // d log(x)/dx = 1 / x: the input is needed.
  return record_activation("log", x, std::move(y), detail::save(x),
                           [](const Tensor& g, const Tensor& v) { return kernels::div(g, v); });
}

}  // namespace ferry
