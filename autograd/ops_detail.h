// Shared plumbing of the differentiable ops (internal).
#pragma once

#include <ferry/autograd/function.h>
#include <ferry/autograd/record.h>
#include <ferry/autograd/saved_tensor.h>
#include <ferry/autograd/variable.h>
#include <ferry/runtime/object_pool.h>
#include <ferry/runtime/tensor.h>

#include <memory>
#include <string>
#include <vector>

namespace ferry::detail {

// v's value, after checking that v is defined and float32 or float64; `what` names the
// argument ("a", "weight") in the message.
const Tensor& value_of(const char* op, const Variable& v, const char* what);

// Saves v's value for backward only when `wanted` (an input whose gradient needs it).
SavedTensor save_if(bool wanted, const Variable& v);
// Saves an op's own output (named as such if it is modified in place); `op` is a string literal.
SavedTensor save_output(const char* op, const Tensor& y);

// The lists of tensors a thread hands from call to call: apply()'s input values, and the
// gradient lists backward has delivered (backward.cpp gives each back once it is emptied).
using TensorListSpares = ThreadSpares<std::vector<Tensor>, 8>;
// A list of n undefined tensors for a backward closure (or a Function's forward or backward)
// to fill and return, from those spares: a training step then allocates no list per node.
// The variable lists the same way: connect() makes its outputs' list from these, and callers
// that take only the first output (apply_first) hand it back.
using VariableListSpares = ThreadSpares<std::vector<Variable>>;
// An unrecorded call's results as variables that require no grad (undefined stay undefined), in
// a list from VariableListSpares; `values`' emptied list goes to TensorListSpares.
std::vector<Variable> plain_variables(std::vector<Tensor> values);
// apply(fn, inputs)[0], the list of outputs handed back to VariableListSpares.
Variable apply_first(std::shared_ptr<Function> fn, const std::vector<Variable>& inputs);

inline std::vector<Tensor> tensor_list(size_t n) {
  std::vector<Tensor> out = TensorListSpares::take();
  out.resize(n);
  return out;
}

}  // namespace ferry::detail
