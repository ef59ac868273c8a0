// Variable: a Tensor value that the autograd tape can differentiate.
//
// A Variable is a handle: copies share the value, the gradient and the place in the graph. It is
// either a leaf (made by the user; its gradient accumulates into grad()) or the output of a node
// recorded on the tape by a differentiable op. Variables belong to the thread that made them:
// the tape, the grad mode and backward are per thread (ranks of the local transport are threads).
//
// Gradients have the value's shape and dtype. Ops that are given variables of a dtype they do
// not support (every built-in op takes float32 and float64) throw InvalidArgument.
#pragma once

#include <ferry/runtime/tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ferry {

class Variable;

namespace detail {
struct VariableImpl;
class Node;
}  // namespace detail

// Called with the gradient of a variable once it is complete, before it is used (non-leaf) or
// accumulated into grad() (leaf). Returning a defined tensor (same shape and dtype) replaces
// the gradient; returning an undefined Tensor() keeps it.
using GradHook = std::function<Tensor(const Tensor& grad)>;
// Called on a leaf after its gradient of this backward was accumulated into grad(): the point
// where data-parallel training can start reducing it.
using PostAccumulateHook = std::function<void(Variable& leaf)>;

class Variable {
 public:
  Variable();  // undefined: defined() is false
  // A leaf. `name` appears in error messages.
  explicit Variable(Tensor value, bool requires_grad = false, std::string name = "");

  bool defined() const { return impl_ != nullptr; }

  // The data. Writing to it in place (Tensor::copy_, fill_, set_flat, or through an Eigen map
  // followed by bump_version()) while a node saved it makes that node's backward throw.
  const Tensor& value() const;
  DType dtype() const { return value().dtype(); }
  const Shape& shape() const { return value().shape(); }
  int64_t dim() const { return value().dim(); }
  int64_t size(int64_t d) const { return value().size(d); }
  int64_t numel() const { return value().numel(); }

  // The accumulated gradient: undefined until a backward reached this leaf (or a non-leaf that
  // called retain_grad()).
  const Tensor& grad() const;
  void set_grad(Tensor grad);  // same shape and dtype as the value, or undefined
  void zero_grad();            // back to undefined (torch's set_to_none)

  bool requires_grad() const;
  // Leaves only: a non-leaf requires grad exactly when an input of its node did.
  Variable& set_requires_grad(bool requires_grad);
  bool is_leaf() const;
  // A leaf sharing this variable's value (no copy) that does not require grad.
  Variable detach() const;

  const std::string& name() const;
  Variable& set_name(std::string name);
  // The name, or for a nameless variable what made it ("output 0 of matmul", "a leaf").
  std::string describe() const;

  void register_hook(GradHook hook);
  void register_post_accumulate_hook(PostAccumulateHook hook);  // leaves that require grad
  void retain_grad();  // a non-leaf keeps its gradient in grad() (no-op on leaves)

  // See ferry::backward.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;

  detail::VariableImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<detail::VariableImpl>& impl_ptr() const { return impl_; }
  explicit Variable(std::shared_ptr<detail::VariableImpl> impl);

 private:
  void check_defined(const char* what) const;
  std::shared_ptr<detail::VariableImpl> impl_;
};

// Runs the backward pass from `roots`: gradient[i] is d(objective)/d(roots[i]); an undefined
// gradient is allowed only for a one-element root and means 1.
//
// The nodes run in exact reverse recording order, so ranks that recorded the same forward issue
// their backward collectives in the same order. The nodes run are those the roots depend on,
// plus every collective node recorded on this thread before the roots that has not yet run a
// backward: it runs with zero output gradients if the roots do not depend on it, so a rank
// whose loss ignores a collective's output still takes part in its backward (torch would skip
// it on that rank and leave the peers waiting).
//
// Gradients accumulate into the grad() of leaves that require grad. Without retain_graph the
// nodes that ran free their saved tensors and a second backward through them throws
// InvalidArgument. Throws InvalidArgument if a root does not require grad, if a non-scalar root
// has no gradient, if a gradient has the wrong shape, or if a tensor saved for backward was
// modified in place since (naming the variable).
void backward(const std::vector<Variable>& roots, const std::vector<Tensor>& gradients = {},
              bool retain_graph = false);
inline void backward(const Variable& root, const Tensor& gradient = Tensor(),
                     bool retain_graph = false) {
  backward(std::vector<Variable>{root}, std::vector<Tensor>{gradient}, retain_graph);
}

}  // namespace ferry
