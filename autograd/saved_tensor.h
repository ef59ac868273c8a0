// A tensor kept for backward, with the version it had when saved (internal).
#pragma once

#include "runtime/tensor.h"

#include <string>

namespace ferry::detail {

class SavedTensor {
 public:
  SavedTensor() = default;
  // `owner` names the variable the tensor belongs to, for the error message.
  SavedTensor(Tensor tensor, std::string owner);

  // The tensor; throws InvalidArgument naming `op` and the owner if it was modified in place
  // since it was saved (its version moved on) or if it was released.
  const Tensor& get(const std::string& op) const;
  bool defined() const { return tensor_.defined(); }
  void release() { tensor_ = Tensor(); released_ = true; }

 private:
  Tensor tensor_;
  uint64_t version_ = 0;
  std::string owner_;
  bool released_ = false;
};

}  // namespace ferry::detail
