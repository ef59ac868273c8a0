// torchrec's lazy awaitables (torchrec.distributed.types: LazyAwaitable, LazyNoWait,
// LazyGetItemMixin / GetItemLazyAwaitable), on ferry::Awaitable (runtime/awaitable.h).
//
// A LazyAwaitable is an awaitable that is waited for at most once: the first wait() (or the
// first use through value(), *, ->) runs the wait and the callback list and keeps the result;
// every later use returns that result without waiting again. In Python any use of the object
// (an attribute, an operator, a torch function taking it) waits it implicitly; C++ has no such
// hook that stays cheap and explicit, so the use is spelled value() (or *a, a->...):
//
//   LazyAwaitable<Variable> emb(alltoall_pooled(x, info, group));  // launched, not waited
//   ...                                          // other work overlaps the all-to-all
//   Variable y = relu(emb.value());              // first use waits; later uses are free
//
// Why a cache: the awaitables underneath (a comm op's request) may be waited for once only
// (req_wait.h), while a lazy result is typically read in several places. Copies share the
// wait, the callback list and the cache. Callbacks are torchrec's: ordered, extended by the
// owners (callbacks(), then()); a callback added after the result was cached does not apply.
// Errors of the wait (the collective's TimeoutError, PeerFailure, MismatchError) propagate
// from the first use; a failed wait caches nothing, so a later use waits again (torchrec
// re-waits while its cache is None) and gets the underlying awaitable's answer (a request
// refuses a second wait with InvalidArgument).
//
// A LazyAwaitable holds an Awaitable<T> (the wait and the callback list) and the cache; it is
// not itself an Awaitable<T>, whose wait() cannot consult a cache. Where an Awaitable<T> is
// wanted, pass as_awaitable() (or let the conversion do it): its wait() is value(), so it too
// waits once. Not thread-safe, as Awaitable.
#pragma once

#include <ferry/runtime/awaitable.h>
#include <ferry/runtime/error.h>

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace ferry::torchrec {

template <class T>
class LazyAwaitable {
 public:
  using Callback = typename Awaitable<T>::Callback;

  LazyAwaitable() = default;  // empty: a use throws InvalidArgument, as an empty Awaitable
  // Waits for `inner` (which applies its own callbacks) on first use; callbacks added here run
  // after them.
  explicit LazyAwaitable(Awaitable<T> inner)
      : LazyAwaitable([inner]() mutable { return inner.wait(); }) {}
  // `wait_impl` (any callable returning T) computes the value on first use (torchrec's
  // _wait_impl).
  template <class F, class = std::enable_if_t<std::is_invocable_r_v<T, std::decay_t<F>&>>>
  explicit LazyAwaitable(F&& wait_impl)
      : state_(std::allocate_shared<State>(awaitable_memory::Allocator<State>(),
                                           Awaitable<T>(std::forward<F>(wait_impl)))) {}

  // The result: waited for (and passed through the callbacks) on the first use only.
  T wait() { return value(); }

  // "Using it waits it": the cached result, waiting first if nobody has yet.
  const T& value() {
    FERRY_CHECK(state_ != nullptr, InvalidArgument, "LazyAwaitable: the awaitable is empty");
    if (!state_->result) state_->result.emplace(state_->awaitable.wait());
    return *state_->result;
  }
  // The result moved out of the cache (waiting first if nobody has yet), for an owner that is
  // the awaitable's last user: a use after it sees a moved-from value.
  T take() {
    value();
    return std::move(*state_->result);
  }
  const T& operator*() { return value(); }
  const T* operator->() { return &value(); }

  // Whether the result is cached (a use will not wait).
  bool ready() const { return state_ != nullptr && state_->result.has_value(); }

  // The callbacks the first use applies, in order; owners extend them.
  std::vector<Callback>& callbacks() {
    FERRY_CHECK(state_ != nullptr, InvalidArgument, "LazyAwaitable: the awaitable is empty");
    return state_->awaitable.callbacks();
  }
  LazyAwaitable& then(Callback cb) {
    callbacks().push_back(std::move(cb));
    return *this;
  }

  // This awaitable as a plain Awaitable<T> whose wait() is value() (shares the cache).
  Awaitable<T> as_awaitable() const {
    return Awaitable<T>([self = *this]() mutable { return self.value(); });
  }
  operator Awaitable<T>() const { return as_awaitable(); }  // NOLINT: torchrec's is-a

 private:
  struct State {
    explicit State(Awaitable<T> a) : awaitable(std::move(a)) {}
    Awaitable<T> awaitable;
    std::optional<T> result;
  };
  std::shared_ptr<State> state_;
};

// torchrec LazyNoWait(obj): a LazyAwaitable that is ready at birth.
template <class T>
class LazyNoWait : public LazyAwaitable<T> {
 public:
  explicit LazyNoWait(T obj)
      : LazyAwaitable<T>([obj = std::move(obj)] { return obj; }) {}
};

// The value a GetItemLazyAwaitable of a T gives for a Key: T::at(key) (std::vector, std::map,
// std::unordered_map and ferry's keyed containers all provide it, bounds-checked).
template <class T, class Key>
using ItemOf = std::decay_t<decltype(std::declval<const T&>().at(std::declval<const Key&>()))>;

// torchrec GetItemLazyAwaitable(parent, key): wait = wait(parent)[key]. The parent is waited
// through its cache, so several items of one parent wait it once (torchrec's _wait_async). A
// key the result does not hold throws InvalidArgument at the wait.
template <class T, class Key>
class GetItemLazyAwaitable : public LazyAwaitable<ItemOf<T, Key>> {
 public:
  GetItemLazyAwaitable(LazyAwaitable<T> parent, Key key)
      : LazyAwaitable<ItemOf<T, Key>>(std::function<ItemOf<T, Key>()>(
            [parent = std::move(parent), key = std::move(key)]() mutable -> ItemOf<T, Key> {
              try {
                return parent.value().at(key);
              } catch (const std::out_of_range& e) {
                FERRY_THROW(InvalidArgument, "GetItemLazyAwaitable: the parent's result has no "
                            "such item (", e.what(), ")");
              }
            })) {}
};

// torchrec LazyGetItemMixin.__getitem__: `get_item(lazy, key)` is lazy[key].
template <class T, class Key>
GetItemLazyAwaitable<T, Key> get_item(const LazyAwaitable<T>& parent, Key key) {
  return GetItemLazyAwaitable<T, Key>(parent, std::move(key));
}

}  // namespace ferry::torchrec
