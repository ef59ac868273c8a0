#include <ferry/autograd/variable.h>

#include <ferry/autograd/node.h>
#include <ferry/runtime/object_pool.h>
#include <ferry/runtime/error.h>

#include <span>
#include <utility>

namespace ferry {

Variable::Variable() = default;

Variable::Variable(Tensor value, bool requires_grad, std::string name)
    : impl_(detail::make_pooled<detail::VariableImpl>()) {
  FERRY_CHECK(value.defined(), InvalidArgument, "Variable: the value is an undefined tensor");
  impl_->value = std::move(value);
  impl_->name = std::move(name);
  set_requires_grad(requires_grad);
}

Variable::Variable(std::shared_ptr<detail::VariableImpl> impl) : impl_(std::move(impl)) {}

void Variable::check_defined(const char* what) const {
  FERRY_CHECK(impl_ != nullptr, InvalidArgument, "Variable::", what,
              ": the variable is undefined");
}

const Tensor& Variable::value() const {
  check_defined("value");
  return impl_->value;
}

const Tensor& Variable::grad() const {
  check_defined("grad");
  return impl_->grad;
}

void Variable::set_grad(Tensor grad) {
  check_defined("set_grad");
  if (grad.defined()) {
    FERRY_CHECK(grad.shape() == impl_->value.shape() && grad.dtype() == impl_->value.dtype(),
                InvalidArgument, "Variable::set_grad of ", describe(), ": expected ",
                dtype_name(impl_->value.dtype()), shape_str(impl_->value.shape()), ", given ",
                dtype_name(grad.dtype()), shape_str(grad.shape()));
  }
  impl_->grad = std::move(grad);
  impl_->grad_is_private = false;
}

void Variable::zero_grad() {
  check_defined("zero_grad");
  impl_->grad = Tensor();
  impl_->grad_is_private = false;
}

bool Variable::requires_grad() const {
  check_defined("requires_grad");
  return impl_->requires_grad;
}

Variable& Variable::set_requires_grad(bool requires_grad) {
  check_defined("set_requires_grad");
  FERRY_CHECK(is_leaf(), InvalidArgument, "Variable::set_requires_grad of ", describe(),
              ": only leaves can change requires_grad (use detach() to cut a variable off "
              "the graph)");
  if (requires_grad) {
    FERRY_CHECK(is_floating(impl_->value.dtype()), InvalidArgument,
                "Variable::set_requires_grad of ", describe(), ": only floating dtypes can "
                "require grad, given ", dtype_name(impl_->value.dtype()));
  }
  impl_->requires_grad = requires_grad;
  return *this;
}

bool Variable::is_leaf() const {
  check_defined("is_leaf");
  return impl_->producer == nullptr;
}

Variable Variable::detach() const {
  check_defined("detach");
  auto impl = detail::make_pooled<detail::VariableImpl>();
  impl->value = impl_->value;
  impl->name = impl_->name;
  return Variable(std::move(impl));
}

const std::string& Variable::name() const {
  check_defined("name");
  return impl_->name;
}

Variable& Variable::set_name(std::string name) {
  check_defined("set_name");
  impl_->name = std::move(name);
  return *this;
}

std::string Variable::describe() const {
  if (impl_ == nullptr) return "an undefined variable";
  if (!impl_->name.empty()) return "variable '" + impl_->name + "'";
  if (impl_->producer) {
    return detail::str("output ", impl_->output_index, " of ", impl_->producer->name());
  }
  return "a leaf variable of shape " + shape_str(impl_->value.shape());
}

void Variable::register_hook(GradHook hook) {
  check_defined("register_hook");
  FERRY_CHECK(impl_->requires_grad, InvalidArgument, "Variable::register_hook on ", describe(),
              ": it does not require grad, so it never receives a gradient");
  if (impl_->producer) {
    impl_->producer->outputs()[impl_->output_index].hooks.push_back(std::move(hook));
  } else {
    impl_->hooks.push_back(std::move(hook));
  }
}

void Variable::register_post_accumulate_hook(PostAccumulateHook hook) {
  check_defined("register_post_accumulate_hook");
  FERRY_CHECK(is_leaf() && impl_->requires_grad, InvalidArgument,
              "Variable::register_post_accumulate_hook on ", describe(),
              ": only leaves that require grad accumulate a gradient");
  impl_->post_hooks.push_back(std::move(hook));
}

void Variable::retain_grad() {
  check_defined("retain_grad");
  FERRY_CHECK(impl_->requires_grad, InvalidArgument, "Variable::retain_grad on ", describe(),
              ": it does not require grad");
  if (impl_->producer) impl_->producer->outputs()[impl_->output_index].retained = impl_;
}

void Variable::backward(const Tensor& gradient, bool retain_graph) const {
  detail::run_backward(std::span<const Variable>(this, 1),
                       std::span<const Tensor>(&gradient, 1), retain_graph);
}

}  // namespace ferry
