// ferry::detail::Task: a move-only void() callable for a group's worker (internal).
//
// The worker's tasks capture a shared_ptr (the Work they drive) and a pointer or two: 24-40
// bytes. std::function keeps a callable inline only when it is trivially copyable and at most
// 16 bytes, so every such task cost a heap block; a Task keeps callables up to kInlineBytes
// inside itself and takes larger ones from the thread's pool (object_pool.h).
#pragma once

#include <ferry/runtime/object_pool.h>

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace ferry::detail {

class Task {
 public:
  static constexpr size_t kInlineBytes = 48;

  Task() = default;
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, Task> &&
                                               std::is_invocable_r_v<void, std::decay_t<F>&>>>
  Task(F&& f) {  // NOLINT: implicit, as a lambda is passed where a task is expected
    using Fn = std::decay_t<F>;
    if constexpr (fits<Fn>()) {
      ::new (static_cast<void*>(inline_)) Fn(std::forward<F>(f));
      ops_ = &kInline<Fn>;
    } else {
      void* block = pool_take(sizeof(Fn));
      try {
        ::new (block) Fn(std::forward<F>(f));
      } catch (...) {
        pool_give(block, sizeof(Fn));
        throw;
      }
      heap_ = block;
      ops_ = &kPooled<Fn>;
    }
  }
  Task(Task&& other) noexcept { take(std::move(other)); }
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      reset();
      take(std::move(other));
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() { reset(); }

  explicit operator bool() const { return ops_ != nullptr; }
  void operator()() { ops_->call(target()); }
  // Destroys the callable (and what it captured) now; the task is then empty.
  void reset() noexcept {
    if (ops_ == nullptr) return;
    ops_->destroy(target());
    if (heap_ != nullptr) ops_->release(heap_);
    ops_ = nullptr;
    heap_ = nullptr;
  }

 private:
  struct Ops {
    void (*call)(void*);
    void (*destroy)(void*) noexcept;
    void (*move)(void* from, void* to) noexcept;  // inline only: construct at `to`, destroy `from`
    void (*release)(void*) noexcept;              // pooled only: gives the block back
  };
  template <class Fn>
  static constexpr bool fits() {
    return sizeof(Fn) <= kInlineBytes && alignof(Fn) <= alignof(std::max_align_t) &&
           std::is_nothrow_move_constructible_v<Fn>;
  }
  template <class Fn>
  static constexpr Ops kInline{
      [](void* p) { (*static_cast<Fn*>(p))(); },
      [](void* p) noexcept { static_cast<Fn*>(p)->~Fn(); },
      [](void* from, void* to) noexcept {
        ::new (to) Fn(std::move(*static_cast<Fn*>(from)));
        static_cast<Fn*>(from)->~Fn();
      },
      nullptr};
  template <class Fn>
  static constexpr Ops kPooled{
      [](void* p) { (*static_cast<Fn*>(p))(); },
      [](void* p) noexcept { static_cast<Fn*>(p)->~Fn(); },
      nullptr,
      [](void* p) noexcept { pool_give(p, sizeof(Fn)); }};

  void* target() { return heap_ != nullptr ? heap_ : static_cast<void*>(inline_); }
  void take(Task&& other) noexcept {
    ops_ = std::exchange(other.ops_, nullptr);
    heap_ = std::exchange(other.heap_, nullptr);
    if (ops_ != nullptr && heap_ == nullptr) ops_->move(other.inline_, inline_);
  }

  alignas(std::max_align_t) unsigned char inline_[kInlineBytes];
  const Ops* ops_ = nullptr;
  void* heap_ = nullptr;  // the pooled callable, when it does not fit inline
};

}  // namespace ferry::detail
