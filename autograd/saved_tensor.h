// A tensor kept for backward, with the version it had when saved (internal).
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/runtime/tensor.h>

#include <memory>
#include <string>
#include <string_view>

namespace ferry {
class Function;
}

namespace ferry::detail {

class SavedTensor {
 public:
  SavedTensor() = default;
  // `owner` names the variable the tensor belongs to, for the error message.
  SavedTensor(Tensor tensor, std::string owner);
  // The variable's value, named after the variable. Cheap: the variable is kept by a weak
  // reference and its name read only if the error is raised (built-in ops save on every call,
  // and copying a parameter's name was a heap allocation per save).
  explicit SavedTensor(const Variable& v);
  // An op's own output, named "the output of <op>" only if the error is raised; `op` is a
  // string literal (it is kept as a pointer).
  static SavedTensor output_of(const char* op, Tensor tensor);
  // A tensor a Function saved, named only if the error is raised: "input i of <fn>" (or the
  // input's own name, if the variable has one), "output k of <fn>", or "a tensor saved by <fn>"
  // when `index` is negative. `fn` must outlive the SavedTensor (its node owns both).
  static SavedTensor argument_of(const Function* fn, Tensor tensor, bool is_output,
                                 int64_t index, const Variable* input);

  // The tensor; throws InvalidArgument naming `op` and the owner if it was modified in place
  // since it was saved (its version moved on) or if it was released.
  const Tensor& get(std::string_view op) const;
  bool defined() const { return tensor_.defined(); }
  void release() { tensor_ = Tensor(); released_ = true; }

 private:
  std::string describe_owner() const;

  Tensor tensor_;
  uint64_t version_ = 0;
  std::string owner_;                     // a full description, when described_
  std::weak_ptr<VariableImpl> variable_;  // the variable saved, by SavedTensor(const Variable&)
  const char* output_of_ = nullptr;       // set by output_of()
  const Function* fn_ = nullptr;          // set by argument_of(), with the two below
  int64_t index_ = -1;
  bool is_output_ = false;
  bool described_ = false;
  bool released_ = false;
};

}  // namespace ferry::detail
