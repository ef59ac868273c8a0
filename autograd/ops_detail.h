// Shared plumbing of the differentiable ops (internal).
#pragma once

#include <ferry/autograd/record.h>
#include <ferry/autograd/saved_tensor.h>
#include <ferry/autograd/variable.h>
#include <ferry/runtime/tensor.h>

#include <string>

namespace ferry::detail {

// v's value, after checking that v is defined and float32 or float64; `what` names the
// argument ("a", "weight") in the message.
const Tensor& value_of(const char* op, const Variable& v, const char* what);

// Saves v's value for backward only when `wanted` (an input whose gradient needs it).
SavedTensor save_if(bool wanted, const Variable& v);
// Saves an op's own output (named as such if it is modified in place); `op` is a string literal.
SavedTensor save_output(const char* op, const Tensor& y);

}  // namespace ferry::detail
