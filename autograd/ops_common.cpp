// Argument checks and saving shared by the differentiable ops.
#include <ferry/autograd/ops_detail.h>
#include <ferry/autograd/tensor_math.h>

namespace ferry::detail {

const Tensor& value_of(const char* op, const Variable& v, const char* what) {
  FERRY_CHECK(v.defined(), InvalidArgument, op, ": ", what, " is an undefined variable");
  kernels::check_float(op, v.value());
  return v.value();
}

SavedTensor save_if(bool wanted, const Variable& v) { return wanted ? save(v) : SavedTensor(); }

SavedTensor save_output(const char* op, const Tensor& y) {
  return SavedTensor::output_of(op, y);
}

}  // namespace ferry::detail
