// Custom differentiable functions: a forward and a hand-written backward (torch.autograd.Function).
//
//   class Scale : public ferry::Function {
//    public:
//     explicit Scale(double s) : s_(s) {}                      // non-tensor attributes
//     std::string name() const override { return "scale"; }
//     std::vector<Tensor> forward(Context& ctx, const std::vector<Tensor>& in) override;
//     std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& grad_out) override;
//    private:
//     double s_;
//   };
//   Variable y = ferry::apply(std::make_shared<Scale>(2.0), {x})[0];
//
// The contract: forward runs with recording off, so whatever it calls is not differentiated; only
// backward defines the gradient. backward gets one gradient per output (zeros for outputs that
// received none, unless materialisation is switched off, then undefined tensors) and returns one
// tensor per input: undefined means "no gradient"; a defined one must have exactly the input's
// shape and dtype (torch silently sums a broadcast gradient down to the input's shape; ferry
// throws). Gradients returned for inputs that do not require grad are dropped. backward runs with
// recording off too.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/runtime/tensor.h>

#include <any>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ferry {

class Function;

namespace detail {
class SavedTensor;
class FunctionNode;
struct PooledContextDelete;
}  // namespace detail

class Context {
 public:
  Context();
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Keeps tensors for backward. Modifying one in place before backward makes saved() throw,
  // naming the variable it came from (an input or output of this function, if it is one).
  void save_for_backward(const std::vector<Tensor>& tensors);
  std::vector<Tensor> saved() const;

  // Whether input i requires a gradient (false for inputs that are undefined or do not).
  bool needs_input_grad(size_t i) const;
  size_t num_inputs() const { return num_inputs_; }

  // The output does not require grad and backward always receives an undefined or zero
  // gradient for it (integer outputs, sizes, masks).
  void mark_non_differentiable(size_t output_index);
  // Default true: outputs that received no gradient are given zeros in backward.
  void set_materialize_grads(bool materialize) { materialize_grads_ = materialize; }

  // Non-tensor attributes for backward (the Function's own members are the other place).
  template <class T>
  void set(const std::string& key, T value) {
    attributes_[key] = std::move(value);
  }
  template <class T>
  const T& get(const std::string& key) const;

 private:
  friend class detail::FunctionNode;
  friend struct detail::PooledContextDelete;
  friend std::vector<Variable> apply(std::shared_ptr<Function>, const std::vector<Variable>&);
  // Back to a new context's state, keeping the lists' capacity (for the next recorded call).
  void clear();
  // The op's name, for error messages: asked of the function only when one is written (a
  // name longer than 15 characters costs an allocation, and most calls need none).
  std::string op() const;
  const Function* fn_ = nullptr;  // owned by the node (or apply()) that owns this context
  size_t num_inputs_ = 0;
  std::vector<bool> needs_input_grad_;  // empty when nothing is recorded: every entry false
  std::vector<bool> non_differentiable_;
  bool materialize_grads_ = true;
  // save_for_backward collects tensors here during forward; apply() turns them into saved_
  // once it knows which input or output each one is (to name it in errors).
  std::vector<Tensor> to_save_;
  std::vector<detail::SavedTensor> saved_;
  std::map<std::string, std::any> attributes_;
};

class Function {
 public:
  virtual ~Function() = default;
  virtual std::string name() const = 0;
  virtual std::vector<Tensor> forward(Context& ctx, const std::vector<Tensor>& inputs) = 0;
  virtual std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& grad_outputs) = 0;
  // True for functions whose backward communicates: every rank must run it, so backward runs it
  // (with zero gradients) even on a rank whose loss does not depend on its outputs.
  virtual bool is_collective() const { return false; }
};

// Runs fn->forward on the inputs' values and, when grad mode is on and an input requires grad,
// records a node so that backward calls fn->backward. Undefined inputs are passed as undefined
// tensors. Returns one Variable per forward output.
std::vector<Variable> apply(std::shared_ptr<Function> fn, const std::vector<Variable>& inputs);

template <class T>
const T& Context::get(const std::string& key) const {
  auto it = attributes_.find(key);
  if (it == attributes_.end()) {
    throw InvalidArgument(op() + ": no context attribute named '" + key + "'");
  }
  const T* value = std::any_cast<T>(&it->second);
  if (value == nullptr) {
    throw InvalidArgument(op() + ": context attribute '" + key + "' has another type");
  }
  return *value;
}

}  // namespace ferry
