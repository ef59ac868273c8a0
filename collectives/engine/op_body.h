// detail::OpBody: a queued op's run-to-completion body (internal). It runs on the group's
// worker (or on a thread waiting for the op); what it returns becomes Work::outputs().
//
// A std::function would put every body's captures on the heap (libstdc++ keeps only trivially
// copyable callables of up to 16 bytes inline), one allocation per queued op, made on the
// issuing thread and freed on the group's worker. An OpBody keeps a callable of up to
// kInlineBytes inside itself, so the body lives in its op's Work (queued_work.h), which the
// issuing thread's pool recycles; a larger callable goes to the heap as before. Move-only: a
// body runs once.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace ferry {
class Tensor;
}

namespace ferry::detail {

class OpContext;

class OpBody {
 public:
  // Room for two tensors, two split lists and a few scalars: what the ops' bodies capture.
  static constexpr size_t kInlineBytes = 256;

  OpBody() = default;
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, OpBody>>>
  OpBody(F&& f) {  // NOLINT: implicit, as a lambda is passed where a body is expected
    using Fn = std::decay_t<F>;
    // A lambda that copies a `const Tensor&` parameter holds a const Tensor, which moves by
    // copying: such a body went to the heap unnoticed, one allocation per queued op. Capture
    // it as `x = Tensor(x)` instead.
    static_assert(sizeof(Fn) > kInlineBytes || std::is_nothrow_move_constructible_v<Fn>,
                  "an op body that fits inline must move without throwing (no const captures)");
    if constexpr (fits_inline<Fn>()) {
      fn_ = ::new (static_cast<void*>(storage_)) Fn(std::forward<F>(f));
      ops_ = &kInlineOps<Fn>;
    } else {
      fn_ = new Fn(std::forward<F>(f));
      ops_ = &kHeapOps<Fn>;
    }
  }
  OpBody(OpBody&& other) noexcept { take(other); }
  OpBody& operator=(OpBody&& other) noexcept {
    if (this != &other) {
      reset();
      take(other);
    }
    return *this;
  }
  OpBody(const OpBody&) = delete;
  OpBody& operator=(const OpBody&) = delete;
  ~OpBody() { reset(); }

  explicit operator bool() const { return ops_ != nullptr; }
  std::vector<Tensor> operator()(OpContext& ctx) { return ops_->call(fn_, ctx); }

  // Destroys the callable (and so lets go of the tensors it captured).
  void reset() noexcept {
    if (ops_ != nullptr) ops_->destroy(fn_);
    ops_ = nullptr;
    fn_ = nullptr;
  }

 private:
  struct Ops {
    std::vector<Tensor> (*call)(void* fn, OpContext& ctx);
    // Moves the callable at `fn` into `storage` (inline) or hands its pointer over (heap);
    // returns where it is now. The source is left empty.
    void* (*move)(void* fn, unsigned char* storage) noexcept;
    void (*destroy)(void* fn) noexcept;
  };

  template <class Fn>
  static constexpr bool fits_inline() {
    return sizeof(Fn) <= kInlineBytes && alignof(Fn) <= alignof(std::max_align_t) &&
           std::is_nothrow_move_constructible_v<Fn>;
  }
  template <class Fn>
  static std::vector<Tensor> call(void* fn, OpContext& ctx) {
    return (*static_cast<Fn*>(fn))(ctx);
  }
  template <class Fn>
  static constexpr Ops kInlineOps{
      &call<Fn>,
      [](void* fn, unsigned char* storage) noexcept -> void* {
        Fn* from = static_cast<Fn*>(fn);
        void* to = ::new (static_cast<void*>(storage)) Fn(std::move(*from));
        from->~Fn();
        return to;
      },
      [](void* fn) noexcept { static_cast<Fn*>(fn)->~Fn(); }};
  template <class Fn>
  static constexpr Ops kHeapOps{&call<Fn>,
                                [](void* fn, unsigned char*) noexcept -> void* { return fn; },
                                [](void* fn) noexcept { delete static_cast<Fn*>(fn); }};

  void take(OpBody& other) noexcept {
    if (other.ops_ == nullptr) return;
    ops_ = other.ops_;
    fn_ = ops_->move(other.fn_, storage_);
    other.ops_ = nullptr;
    other.fn_ = nullptr;
  }

  alignas(std::max_align_t) unsigned char storage_[kInlineBytes];
  void* fn_ = nullptr;
  const Ops* ops_ = nullptr;
};

}  // namespace ferry::detail
