// Recording built-in ops on the tape (internal). A built-in op computes its value eagerly and,
// when recording, hands the tape a closure that computes its input gradients (Flashlight style):
//
//   Variable relu(const Variable& x) {
//     Tensor y = kernels::relu(x.value());
//     if (!detail::should_record({&x})) return Variable(y);
//     detail::SavedTensor saved_x = detail::save(x);
//     return detail::record("relu", {&x}, y,
//         [saved_x](const std::vector<Tensor>& g, const std::vector<bool>&) {
//           return std::vector<Tensor>{kernels::relu_backward(g[0], saved_x.get("relu"))};
//         });
//   }
#pragma once

#include <ferry/autograd/backward_fn.h>
#include <ferry/autograd/node.h>
#include <ferry/autograd/saved_tensor.h>
#include <ferry/autograd/variable.h>

#include <vector>

namespace ferry::detail {

// Records a node named `op` with the given inputs and output values; returns the outputs as
// variables. Call only when should_record(inputs) is true.
std::vector<Variable> record(const char* op, VariablePtrs inputs, std::vector<Tensor> outputs,
                             BackwardFn backward);
Variable record(const char* op, VariablePtrs inputs, Tensor output, BackwardFn backward);
inline std::vector<Variable> record(const char* op, std::initializer_list<const Variable*> inputs,
                                    std::vector<Tensor> outputs, BackwardFn backward) {
  return record(op, VariablePtrs(inputs.begin(), inputs.size()), std::move(outputs),
                std::move(backward));
}
inline Variable record(const char* op, std::initializer_list<const Variable*> inputs,
                       Tensor output, BackwardFn backward) {
  return record(op, VariablePtrs(inputs.begin(), inputs.size()), std::move(output),
                std::move(backward));
}

// Saves a variable's value for backward, named after the variable.
SavedTensor save(const Variable& v);

}  // namespace ferry::detail
