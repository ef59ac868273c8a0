// A tensor kept for backward, with the version it had when saved (internal).
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/runtime/tensor.h>

#include <string>

namespace ferry::detail {

class SavedTensor {
 public:
  SavedTensor() = default;
  // `owner` names the variable the tensor belongs to, for the error message.
  SavedTensor(Tensor tensor, std::string owner);
  // The variable's value, named after the variable. Cheap: the name is only put together if
  // the error is raised (built-in ops save on every call).
  explicit SavedTensor(const Variable& v);
  // An op's own output, named "the output of <op>" only if the error is raised; `op` is a
  // string literal (it is kept as a pointer).
  static SavedTensor output_of(const char* op, Tensor tensor);

  // The tensor; throws InvalidArgument naming `op` and the owner if it was modified in place
  // since it was saved (its version moved on) or if it was released.
  const Tensor& get(const std::string& op) const;
  bool defined() const { return tensor_.defined(); }
  void release() { tensor_ = Tensor(); released_ = true; }

 private:
  std::string describe_owner() const;

  Tensor tensor_;
  uint64_t version_ = 0;
  std::string owner_;        // a full description, or the variable's name
  std::string producer_op_;  // for a nameless non-leaf: the op that made it
  const char* output_of_ = nullptr;  // set by output_of()
  uint32_t output_index_ = 0;
  bool described_ = false;   // owner_ is a full description
  bool released_ = false;
};

}  // namespace ferry::detail
