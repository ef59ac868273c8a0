// Awaitable / NoWait (runtime/awaitable.h): torchrec's callback semantics, and how an Awaitable
// over a Work keeps the Work's deadline and error.
#include <ferry/runtime/awaitable.h>
#include <ferry/runtime/config.h>
#include "tests/collectives/test_helpers.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>

using namespace ferry;

TEST_CASE("Awaitable: wait runs the callbacks in list order, each on the previous result",
          "[awaitable]") {
  int waits = 0;
  Awaitable<std::string> a([&] {
    ++waits;
    return std::string("x");
  });
  a.then([](std::string s) { return s + "1"; }).then([](std::string s) { return s + "2"; });
  // An owner extends the list it was handed (PooledEmbeddingsAwaitable.callbacks.extend).
  Awaitable<std::string> handed = a;
  handed.callbacks().push_back([](std::string s) { return "(" + s + ")"; });
  CHECK(a.wait() == "(x12)");
  CHECK(waits == 1);
  // Waiting again runs the wait and the callbacks again: the wait decides whether it may.
  CHECK(handed.wait() == "(x12)");
  CHECK(waits == 2);
}

TEST_CASE("Awaitable: a callback may append another one while the list runs", "[awaitable]") {
  Awaitable<int> a([] { return 1; });
  a.then([&a](int v) {
    a.callbacks().push_back([](int w) { return w * 10; });
    return v + 1;
  });
  CHECK(a.wait() == 20);
}

TEST_CASE("NoWait returns its object, through the callbacks, at every wait", "[awaitable]") {
  NoWait<int> n(41);
  CHECK(n.wait() == 41);
  n.then([](int v) { return v + 1; });
  Awaitable<int> as_awaitable = n;  // a NoWait is an Awaitable
  CHECK(as_awaitable.wait() == 42);
  CHECK(n.wait() == 42);
}

TEST_CASE("an empty Awaitable refuses to be waited for", "[awaitable]") {
  Awaitable<int> empty;
  CHECK_FALSE(empty.valid());
  CHECK_THROWS_AS(empty.wait(), InvalidArgument);
  CHECK_THROWS_WITH(empty.wait(), Catch::Contains("empty"));
}

TEST_CASE("Awaitable::after: the Work's error is rethrown at wait, the callbacks skipped",
          "[awaitable]") {
  auto state = std::make_shared<detail::WorkState>(std::string("a failing op"));
  bool called = false;
  Awaitable<int> a = Awaitable<int>::after(Work(state), [] { return 7; });
  a.then([&](int v) {
    called = true;
    return v;
  });
  state->fail(std::make_exception_ptr(PeerFailure("ferry: rank 1 died")));
  CHECK_THROWS_AS(a.wait(), PeerFailure);
  CHECK_FALSE(called);
}

TEST_CASE("Awaitable::after: a Work that never completes ends in TimeoutError at its deadline",
          "[awaitable]") {
  ftest::ScopedDefaultTimeout shorter(std::chrono::milliseconds(50));
  auto state = std::make_shared<detail::WorkState>(std::string("a stuck op"));
  Awaitable<int> a = Awaitable<int>::after(Work(state), [] { return 7; });
  CHECK_THROWS_AS(a.wait(), TimeoutError);
  CHECK_THROWS_WITH(a.wait(), Catch::Contains("a stuck op"));
}

TEST_CASE("Awaitable::after a completed Work returns the result", "[awaitable]") {
  Awaitable<int> a = Awaitable<int>::after(Work::completed(), [] { return 7; });
  a.then([](int v) { return v * 2; });
  CHECK(a.wait() == 14);
}
