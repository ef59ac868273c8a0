#include "autograd/saved_tensor.h"

#include "runtime/error.h"

namespace ferry::detail {

SavedTensor::SavedTensor(Tensor tensor, std::string owner)
    : tensor_(std::move(tensor)),
      version_(tensor_.defined() ? tensor_.version() : 0),
      owner_(std::move(owner)) {}

const Tensor& SavedTensor::get(const std::string& op) const {
  if (released_) {
    FERRY_THROW(InvalidArgument, op, ": backward through a graph a second time: the tensors "
                "saved for it were freed by the first backward (pass retain_graph = true to "
                "the first backward to keep them)");
  }
  if (tensor_.defined() && tensor_.version() != version_) {
    FERRY_THROW(InvalidArgument, op, ": ", owner_, ", saved for backward, was modified in place "
                "after it was saved (version ", tensor_.version(), ", expected ", version_,
                "); compute on a copy, or modify it only after backward");
  }
  return tensor_;
}

}  // namespace ferry::detail
