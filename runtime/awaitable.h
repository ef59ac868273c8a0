// Awaitable<T>: a value that becomes available later, with torchrec's semantics.
//
// wait() computes the value (the awaitable's own wait, e.g. finishing a collective) and passes
// it through the callback list in order, ret = cb(ret), returning the last result. The list is
// the owners' to extend: a module that wraps a request appends its own post-processing (a
// permutation, a reshape) and hands the awaitable on. Callbacks added after a wait apply to the
// next wait only.
//
//   Awaitable<Tensor> a = Awaitable<Tensor>::after(work, [out] { return out; });
//   a.then([](Tensor t) { return t.narrow(0, 0, 2); });
//   Tensor t = a.wait();   // rethrows the Work's error; bounded by its deadline
//
// NoWait<T>(obj) is ready at birth: wait() returns obj (through the callbacks). Ops return one
// when there is nothing to wait for (a group of one rank, a synchronous mode).
//
// An Awaitable is a handle: copies share the wait and the callback list. Whether it may be
// waited more than once is the wait's business: NoWait and after() compute their value again
// (their wait is idempotent), a differentiable request throws InvalidArgument on a second wait
// (see collectives/differentiable/req_wait.h). A default-constructed Awaitable is empty: wait()
// throws InvalidArgument. Not thread-safe: one thread waits and edits the callbacks.
#pragma once

#include <ferry/runtime/error.h>
#include <ferry/runtime/work.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace ferry {

// Memory for awaitables' shared states (not for direct use). A training step makes and drops
// tens of awaitables; their states come from the calling thread's free lists of small blocks
// (the ones tensors' control blocks use) instead of malloc. The functions are the library's,
// so that code compiled against this header reaches the lists.
namespace awaitable_memory {

void* take(size_t bytes);
void give(void* block, size_t bytes) noexcept;

// An allocator over take / give, for std::allocate_shared (over-aligned types go to
// std::allocator).
template <class U>
struct Allocator {
  using value_type = U;
  Allocator() = default;
  template <class V>
  Allocator(const Allocator<V>&) noexcept {}  // NOLINT: rebinding, as std::allocator
  U* allocate(size_t n) {
    if constexpr (alignof(U) > alignof(std::max_align_t)) {
      return std::allocator<U>().allocate(n);
    } else {
      if (n > static_cast<size_t>(-1) / sizeof(U)) throw std::bad_array_new_length();
      return static_cast<U*>(take(n * sizeof(U)));
    }
  }
  void deallocate(U* p, size_t n) noexcept {
    if constexpr (alignof(U) > alignof(std::max_align_t)) {
      std::allocator<U>().deallocate(p, n);
    } else {
      give(p, n * sizeof(U));
    }
  }
  template <class V>
  bool operator==(const Allocator<V>&) const noexcept {
    return true;
  }
};

}  // namespace awaitable_memory

template <class T>
class Awaitable {
 public:
  using Callback = std::function<T(T)>;

  Awaitable() = default;
  // `wait_impl` (any callable returning T) produces the value when waited for. It is kept
  // inside the awaitable's shared state: one block for both, from awaitable_memory.
  template <class F, class = std::enable_if_t<std::is_invocable_r_v<T, std::decay_t<F>&>>>
  explicit Awaitable(F&& wait_impl)
      : state_(std::allocate_shared<StateOf<std::decay_t<F>>>(
            awaitable_memory::Allocator<StateOf<std::decay_t<F>>>(),
            std::forward<F>(wait_impl))) {}

  // Composes with a Work: wait() waits for `work` (under its deadline, rethrowing its error),
  // then returns result().
  static Awaitable after(Work work, std::function<T()> result) {
    return Awaitable([work = std::move(work), result = std::move(result)]() mutable {
      work.wait();
      return result();
    });
  }

  bool valid() const { return state_ != nullptr; }

  T wait() {
    FERRY_CHECK(state_ != nullptr, InvalidArgument, "Awaitable::wait: the awaitable is empty");
    T ret = state_->wait_impl();
    // By index: a callback may append to the list while it runs.
    for (size_t i = 0; i < state_->callbacks.size(); ++i) ret = state_->callbacks[i](std::move(ret));
    return ret;
  }

  // The callbacks wait() applies, in order; owners extend it.
  std::vector<Callback>& callbacks() {
    FERRY_CHECK(state_ != nullptr, InvalidArgument, "Awaitable::callbacks: the awaitable is empty");
    return state_->callbacks;
  }
  // Appends `cb`; returns this awaitable, so that calls chain.
  Awaitable& then(Callback cb) {
    callbacks().push_back(std::move(cb));
    return *this;
  }

 private:
  struct State {
    virtual ~State() = default;
    virtual T wait_impl() = 0;
    std::vector<Callback> callbacks;
  };
  template <class F>
  struct StateOf final : State {
    explicit StateOf(F f) : fn(std::move(f)) {}
    T wait_impl() override { return fn(); }
    F fn;
  };
  std::shared_ptr<State> state_;
};

template <class T>
class NoWait : public Awaitable<T> {
 public:
  explicit NoWait(T obj) : Awaitable<T>([obj = std::move(obj)] { return obj; }) {}
};

}  // namespace ferry
