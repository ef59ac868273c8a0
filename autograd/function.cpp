#include <ferry/autograd/function.h>
#include <ferry/autograd/ops_detail.h>

#include <ferry/autograd/grad_mode.h>
#include <ferry/autograd/node.h>
#include <ferry/runtime/object_pool.h>
#include <ferry/autograd/saved_tensor.h>
#include <ferry/runtime/error.h>

#include <new>
#include <utility>

namespace ferry {

Context::Context() = default;
Context::~Context() = default;

void Context::clear() {
  fn_ = nullptr;
  num_inputs_ = 0;
  needs_input_grad_.clear();
  non_differentiable_.clear();
  materialize_grads_ = true;
  to_save_.clear();
  saved_.clear();
  attributes_.clear();
}

void Context::save_for_backward(const std::vector<Tensor>& tensors) {
  to_save_.insert(to_save_.end(), tensors.begin(), tensors.end());
}

std::vector<Tensor> Context::saved() const {
  std::vector<Tensor> tensors = detail::TensorListSpares::take();  // a list backward handed back
  tensors.reserve(saved_.size());
  if (saved_.empty()) return tensors;
  const std::string op_name = op();
  for (const auto& s : saved_) tensors.push_back(s.get(op_name));
  return tensors;
}

std::string Context::op() const { return fn_ ? fn_->name() : "autograd function"; }

bool Context::needs_input_grad(size_t i) const {
  FERRY_CHECK(i < num_inputs_, InvalidArgument, op(), ": needs_input_grad(", i,
              ") but the function has ", num_inputs_, " inputs");
  return i < needs_input_grad_.size() && needs_input_grad_[i];
}

void Context::mark_non_differentiable(size_t output_index) {
  if (non_differentiable_.size() <= output_index) non_differentiable_.resize(output_index + 1);
  non_differentiable_[output_index] = true;
}

namespace detail {

// A recorded call's context lives in the per-thread object pool (object_pool.h), and a dropped
// one is kept emptied by its thread (up to kKeptContexts) for the next recorded call: a training
// step records the same calls every time, and each context, its list of which inputs need a
// gradient and its saved tensors were a malloc each.
constexpr size_t kKeptContexts = 64;

void destroy_context(Context* c) noexcept {
  c->~Context();
  pool_give(c, sizeof(Context));
}

// The calling thread's kept contexts. Trivially destructible state, so that a context dropped
// while the thread's statics are being destroyed finds the list gone and is simply freed.
class KeptContexts {
 public:
  static Context* take() {
    KeptContexts* kept = this_thread();
    return kept == nullptr || kept->count_ == 0 ? nullptr : kept->items_[--kept->count_];
  }
  // False when the list is full or gone: the caller frees the context.
  static bool give(Context* c) {
    KeptContexts* kept = this_thread();
    if (kept == nullptr || kept->count_ == kKeptContexts) return false;
    kept->items_[kept->count_++] = c;
    return true;
  }

 private:
  enum class State : unsigned char { kNotYet, kAlive, kGone };
  KeptContexts() { state() = State::kAlive; }
  ~KeptContexts() {
    state() = State::kGone;
    while (count_ > 0) destroy_context(items_[--count_]);
  }
  static State& state() {
    static thread_local State s = State::kNotYet;
    return s;
  }
  static KeptContexts* this_thread() {
    if (kPoolBypassed || state() == State::kGone) return nullptr;  // AddressSanitizer: no reuse
    static thread_local KeptContexts kept;
    return &kept;
  }

  Context* items_[kKeptContexts];
  size_t count_ = 0;
};

struct PooledContextDelete {
  void operator()(Context* c) const noexcept {
    c->clear();
    if (!KeptContexts::give(c)) destroy_context(c);
  }
};
using PooledContext = std::unique_ptr<Context, PooledContextDelete>;

PooledContext make_pooled_context() {
  if (Context* kept = KeptContexts::take()) return PooledContext(kept);
  void* block = pool_take(sizeof(Context));
  try {
    return PooledContext(new (block) Context());
  } catch (...) {
    pool_give(block, sizeof(Context));
    throw;
  }
}

class FunctionNode final : public Node {
 public:
  FunctionNode(std::shared_ptr<Function> fn, PooledContext ctx, size_t num_outputs)
      : Node(std::string(), num_outputs), fn_(std::move(fn)), ctx_(std::move(ctx)) {}

  std::string name() const override { return fn_->name(); }

  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override {
    return fn_->backward(*ctx_, grad_outputs);
  }
  void release() override {
    for (auto& s : ctx_->saved_) s.release();
    ctx_->attributes_.clear();
  }
  bool is_collective() const override { return fn_->is_collective(); }
  bool materialize_grads() const override { return ctx_->materialize_grads_; }

 private:
  std::shared_ptr<Function> fn_;
  PooledContext ctx_;
};

namespace {

bool same_tensor(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.raw_data() == b.raw_data() && a.shape() == b.shape() &&
         a.dtype() == b.dtype();
}

// A saved tensor, to be named after the input or output it is if it is ever reported as
// modified in place (the name is made only then).
SavedTensor save_argument(const Function* fn, const Tensor& t, const std::vector<Variable>& inputs,
                          const std::vector<Tensor>& outputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].defined() && same_tensor(t, inputs[i].value()))
      return SavedTensor::argument_of(fn, t, false, static_cast<int64_t>(i), &inputs[i]);
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (same_tensor(t, outputs[k]))
      return SavedTensor::argument_of(fn, t, true, static_cast<int64_t>(k), nullptr);
  }
  return SavedTensor::argument_of(fn, t, false, -1, nullptr);
}

}  // namespace
}  // namespace detail

std::vector<Variable> apply(std::shared_ptr<Function> fn, const std::vector<Variable>& inputs) {
  FERRY_CHECK(fn != nullptr, InvalidArgument, "apply: the function is null");
  // The inputs' addresses, filled only when recording (connect() needs them): on the stack for
  // the usual few inputs.
  constexpr size_t kOnStack = 8;
  const Variable* ptrs_on_stack[kOnStack];
  // More (a lookup over tens of tables): a list this thread's earlier calls kept.
  std::vector<const Variable*> ptrs_on_heap;
  // The inputs' values, in a list this thread's earlier calls kept (emptied, with its capacity):
  // a training step makes tens of calls.
  std::vector<Tensor> input_values = detail::ThreadSpares<std::vector<Tensor>, 8>::take();
  input_values.reserve(inputs.size());
  for (const Variable& v : inputs) input_values.push_back(v.defined() ? v.value() : Tensor());
  const bool recording = detail::should_record(inputs);

  // A call that records nothing (no input requires grad, or grad mode is off) runs forward on
  // a context of its own stack: it dies with the call anyway, and its needs_input_grad() is
  // false throughout without a list to say so.
  detail::PooledContext ctx = recording ? detail::make_pooled_context() : nullptr;
  Context unrecorded;
  Context& c = ctx ? *ctx : unrecorded;
  c.fn_ = fn.get();
  c.num_inputs_ = inputs.size();
  const Variable** input_ptrs = ptrs_on_stack;
  if (recording) {
    if (inputs.size() > kOnStack) {
      ptrs_on_heap = detail::ThreadSpares<std::vector<const Variable*>>::take();
      ptrs_on_heap.resize(inputs.size());
      input_ptrs = ptrs_on_heap.data();
    }
    c.needs_input_grad_.resize(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      input_ptrs[i] = &inputs[i];
      c.needs_input_grad_[i] = inputs[i].defined() && inputs[i].requires_grad();
    }
  }
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;  // what forward calls is not differentiated
    outputs = fn->forward(c, input_values);
  }
  input_values.clear();
  detail::ThreadSpares<std::vector<Tensor>, 8>::give(std::move(input_values));

  if (!recording) return detail::plain_variables(std::move(outputs));

  for (const Tensor& t : ctx->to_save_)
    ctx->saved_.push_back(detail::save_argument(fn.get(), t, inputs, outputs));
  ctx->to_save_.clear();
  const std::vector<bool> non_differentiable = std::move(ctx->non_differentiable_);
  auto node = detail::make_pooled<detail::FunctionNode>(fn, std::move(ctx), outputs.size());
  for (size_t k = 0; k < outputs.size(); ++k) {
    // Integer outputs (sizes, indices) cannot carry a gradient.
    const bool marked = k < non_differentiable.size() && non_differentiable[k];
    if (marked || (outputs[k].defined() && !is_floating(outputs[k].dtype()))) {
      node->outputs()[k].differentiable = false;
    }
  }
  std::vector<Variable> connected =
      detail::connect(node, detail::VariablePtrs(input_ptrs, inputs.size()), std::move(outputs));
  if (ptrs_on_heap.capacity() > 0) {
    ptrs_on_heap.clear();
    detail::ThreadSpares<std::vector<const Variable*>>::give(std::move(ptrs_on_heap));
  }
  return connected;
}

namespace detail {

std::vector<Variable> plain_variables(std::vector<Tensor> values) {
  std::vector<Variable> plain = VariableListSpares::take();
  plain.reserve(values.size());
  for (Tensor& t : values) plain.push_back(t.defined() ? Variable(std::move(t)) : Variable());
  values.clear();
  TensorListSpares::give(std::move(values));
  return plain;
}

Variable apply_first(std::shared_ptr<Function> fn, const std::vector<Variable>& inputs) {
  std::vector<Variable> outputs = ferry::apply(std::move(fn), inputs);
  Variable first = std::move(outputs.at(0));
  outputs.clear();
  VariableListSpares::give(std::move(outputs));
  return first;
}

}  // namespace detail
}  // namespace ferry
