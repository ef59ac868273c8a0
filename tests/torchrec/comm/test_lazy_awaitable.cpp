// LazyAwaitable, LazyNoWait, GetItemLazyAwaitable (comm/lazy_awaitable.h) and the comm-op
// switches (comm/comm_switches.h) on one thread: caching, callback order, errors at the wait,
// Work composition, the sync scope's nesting and thread scope, CommOpGradientScaling.
#include <ferry/collectives/run_ranks.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include <ferry/runtime/work.h>

#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <thread>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec;

TEST_CASE("LazyAwaitable waits once, applies the callbacks in order, caches the result",
          "[torchrec][awaitable]") {
  int waits = 0;
  LazyAwaitable<int> lazy(std::function<int()>([&] { return ++waits * 10; }));
  lazy.then([](int v) { return v + 1; }).then([](int v) { return v * 2; });
  lazy.callbacks().push_back([](int v) { return v - 3; });  // an owner extends the list
  CHECK_FALSE(lazy.ready());
  CHECK(waits == 0);
  CHECK(lazy.value() == (10 + 1) * 2 - 3);
  CHECK(*lazy == 19);
  CHECK(lazy.wait() == 19);
  LazyAwaitable<int> copy = lazy;  // copies share the cache
  CHECK(copy.value() == 19);
  Awaitable<int> plain = lazy;     // so does the plain Awaitable it converts to
  CHECK(plain.wait() == 19);
  CHECK(waits == 1);
  CHECK(lazy.ready());
}

TEST_CASE("LazyAwaitable over an Awaitable: the inner callbacks first, then its own",
          "[torchrec][awaitable]") {
  Awaitable<std::string> inner = NoWait<std::string>("a");
  inner.then([](std::string s) { return s + "b"; });
  LazyAwaitable<std::string> lazy(inner);
  lazy.then([](std::string s) { return s + "c"; });
  CHECK(lazy.value() == "abc");
  CHECK(lazy->size() == 3);
  CHECK(LazyNoWait<int>(7).value() == 7);
}

TEST_CASE("LazyAwaitable rethrows the Work's error at the first use and caches nothing",
          "[torchrec][awaitable]") {
  auto state = std::make_shared<ferry::detail::WorkState>(std::string("failing op"));
  state->fail(std::make_exception_ptr(PeerFailure("rank 1 died")));
  LazyAwaitable<int> lazy(Awaitable<int>::after(Work(state), [] { return 1; }));
  CHECK_THROWS_AS(lazy.value(), PeerFailure);
  CHECK_FALSE(lazy.ready());
  CHECK_THROWS_AS(lazy.value(), PeerFailure);  // waits again (torchrec re-waits a None cache)
  LazyAwaitable<int> ok(Awaitable<int>::after(Work::completed(), [] { return 5; }));
  CHECK(ok.value() == 5);
  LazyAwaitable<int> empty;
  CHECK_THROWS_AS(empty.value(), InvalidArgument);
}

TEST_CASE("GetItemLazyAwaitable: wait = wait(parent)[key], the parent waited once",
          "[torchrec][awaitable]") {
  int waits = 0;
  LazyAwaitable<std::map<std::string, int>> parent(
      std::function<std::map<std::string, int>()>([&] {
        ++waits;
        return std::map<std::string, int>{{"f0", 3}, {"f1", 4}};
      }));
  auto f0 = get_item(parent, std::string("f0"));
  GetItemLazyAwaitable<std::map<std::string, int>, std::string> f1(parent, "f1");
  CHECK(waits == 0);
  CHECK(f0.value() == 3);
  CHECK(f1.value() == 4);
  CHECK(waits == 1);
  auto missing = get_item(parent, std::string("f9"));
  CHECK_THROWS_AS(missing.value(), InvalidArgument);

  LazyNoWait<std::vector<int>> list(std::vector<int>{5, 6});
  CHECK(get_item(list, size_t{1}).value() == 6);
}

TEST_CASE("switches: defaults, sync scopes nest and stay on their thread",
          "[torchrec][switches]") {
  CHECK(get_gradient_division());
  CHECK_FALSE(get_use_sync_collectives());
  {
    UseSyncCollectivesScope outer;
    CHECK(get_use_sync_collectives());
    {
      UseSyncCollectivesScope inner(false);
      CHECK_FALSE(get_use_sync_collectives());
    }
    CHECK(get_use_sync_collectives());
    bool other_thread = true;
    std::thread([&] { other_thread = get_use_sync_collectives(); }).join();
    CHECK_FALSE(other_thread);
  }
  CHECK_FALSE(get_use_sync_collectives());
  set_use_sync_collectives(true);
  CHECK(get_use_sync_collectives());
  set_use_sync_collectives(false);
}

TEST_CASE("CommOpGradientScaling: identity forward, gradient times the factor",
          "[torchrec][switches]") {
  Variable x(from_vector<double>({1, 2, 3}), true);
  Variable y = comm_op_gradient_scaling(x, 3);
  CHECK(equal(y.value(), x.value()));
  backward(y, from_vector<double>({1, 10, 100}));
  CHECK(equal(x.grad(), from_vector<double>({3, 30, 300})));
  CHECK(comm_op_gradient_scaling(x, 1).impl() == x.impl());  // nothing recorded
  CHECK_THROWS_AS(comm_op_gradient_scaling(x, 0), InvalidArgument);

  // The group form: W when division is on (read at the call), 1 when off.
  run_ranks(2, [](Group& g) {
    Variable v(from_vector<double>({1}), true);
    backward(comm_op_gradient_scaling(v, g), from_vector<double>({1}));
    if (v.grad().get_flat(0) != 2.0) throw std::runtime_error("factor is not W");
  });
}
