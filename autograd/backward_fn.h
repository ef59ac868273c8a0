// ferry::detail::BackwardFn: the closure a built-in op hands the tape (internal).
//
// It computes one gradient per input (undefined = none) from the gradients of the outputs;
// needs_input_grad[i] says whether input i wants one, and the closure may skip the others.
//
// A move-only std::function of that one signature whose callable lives in the per-thread object
// pool (runtime/object_pool.h). std::function keeps only callables of up to 16 bytes inline, and
// nearly every backward closure captures more (saved tensors, shapes), so recording an op cost a
// malloc for its closure; from the pool, a training step's closures reuse the blocks the step
// before released.
#pragma once

#include <ferry/runtime/object_pool.h>
#include <ferry/runtime/tensor.h>

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace ferry::detail {

class BackwardFn {
 public:
  BackwardFn() = default;
  BackwardFn(std::nullptr_t) {}  // NOLINT: as std::function
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, BackwardFn> &&
                                              !std::is_same_v<std::decay_t<F>, std::nullptr_t>>>
  BackwardFn(F&& f) {  // NOLINT: as std::function, any callable of the signature converts
    using Held = Holder<std::decay_t<F>>;
    void* block = pool_take(sizeof(Held));
    try {
      callable_.reset(new (block) Held(std::forward<F>(f)));
    } catch (...) {
      pool_give(block, sizeof(Held));
      throw;
    }
  }

  std::vector<Tensor> operator()(const std::vector<Tensor>& grad_outputs,
                                 const std::vector<bool>& needs_input_grad) const {
    return callable_->call(grad_outputs, needs_input_grad);
  }
  explicit operator bool() const { return callable_ != nullptr; }

 private:
  struct Callable {
    virtual ~Callable() = default;
    virtual std::vector<Tensor> call(const std::vector<Tensor>& grad_outputs,
                                     const std::vector<bool>& needs_input_grad) = 0;
    virtual size_t bytes() const = 0;
  };
  template <class F>
  struct Holder final : Callable {
    explicit Holder(F&& f) : f(std::move(f)) {}
    explicit Holder(const F& f) : f(f) {}
    std::vector<Tensor> call(const std::vector<Tensor>& grad_outputs,
                             const std::vector<bool>& needs_input_grad) override {
      return f(grad_outputs, needs_input_grad);
    }
    size_t bytes() const override { return sizeof(Holder); }
    F f;
  };
  struct Release {
    void operator()(Callable* c) const noexcept {
      const size_t bytes = c->bytes();
      c->~Callable();
      pool_give(c, bytes);
    }
  };

  std::unique_ptr<Callable, Release> callable_;
};

}  // namespace ferry::detail
