#include <ferry/autograd/saved_tensor.h>

#include <ferry/autograd/function.h>
#include <ferry/autograd/node.h>
#include <ferry/runtime/error.h>

namespace ferry::detail {

SavedTensor::SavedTensor(Tensor tensor, std::string owner)
    : tensor_(std::move(tensor)),
      version_(tensor_.defined() ? tensor_.version() : 0),
      owner_(std::move(owner)),
      described_(true) {}

SavedTensor::SavedTensor(const Variable& v)
    : tensor_(v.value()), version_(tensor_.version()), variable_(v.impl_ptr()) {}

SavedTensor SavedTensor::output_of(const char* op, Tensor tensor) {
  SavedTensor s;
  s.tensor_ = std::move(tensor);
  s.version_ = s.tensor_.defined() ? s.tensor_.version() : 0;
  s.output_of_ = op;
  return s;
}

SavedTensor SavedTensor::argument_of(const Function* fn, Tensor tensor, bool is_output,
                                     int64_t index, const Variable* input) {
  SavedTensor s;
  s.tensor_ = std::move(tensor);
  s.version_ = s.tensor_.defined() ? s.tensor_.version() : 0;
  s.fn_ = fn;
  s.index_ = index;
  s.is_output_ = is_output;
  if (input != nullptr) s.variable_ = input->impl_ptr();
  return s;
}

std::string SavedTensor::describe_owner() const {
  if (described_) return owner_;
  if (output_of_ != nullptr) return str("the output of ", output_of_);
  if (fn_ != nullptr) {
    const std::string op = fn_->name();
    if (index_ < 0) return "a tensor saved by " + op;
    if (!is_output_) {
      if (auto v = variable_.lock(); v && !v->name.empty()) return "variable '" + v->name + "'";
    }
    return str(is_output_ ? "output " : "input ", index_, " of ", op);
  }
  if (auto v = variable_.lock()) {
    if (!v->name.empty()) return "variable '" + v->name + "'";
    if (v->producer) return str("output ", v->output_index, " of ", v->producer->name());
    return "a leaf variable of shape " + shape_str(tensor_.shape());
  }
  return "a variable of shape " + shape_str(tensor_.shape()) + " (dropped since it was saved)";
}

const Tensor& SavedTensor::get(std::string_view op) const {
  if (released_) {
    FERRY_THROW(InvalidArgument, op, ": backward through a graph a second time: the tensors "
                "saved for it were freed by the first backward (pass retain_graph = true to "
                "the first backward to keep them)");
  }
  if (tensor_.defined() && tensor_.version() != version_) {
    FERRY_THROW(InvalidArgument, op, ": ", describe_owner(), ", saved for backward, was modified in place "
                "after it was saved (version ", tensor_.version(), ", expected ", version_,
                "); compute on a copy, or modify it only after backward");
  }
  return tensor_;
}

}  // namespace ferry::detail
