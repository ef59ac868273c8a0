// The per-thread object pool behind make_pooled (tensors' control blocks, tape nodes) and the
// per-thread spares of ThreadSpares: a dropped object's block is the next one of its size class
// on the thread that dropped it, lists are bounded, a thread's lists go with the thread, and
// what a list cannot keep reaches other threads through the depot.
#include <ferry/runtime/object_pool.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <thread>
#include <vector>

using ferry::detail::make_pooled;
using ferry::detail::pool_blocks_kept;
using ferry::detail::ThreadSpares;

namespace {

struct Payload {
  int64_t words[10] = {};
};

// Under AddressSanitizer the pool hands every block back to operator delete at once.
constexpr bool kBypassed = ferry::detail::kPoolBypassed;

}  // namespace

TEST_CASE("make_pooled: a dropped object's block is reused by the next one of its size",
          "[object_pool]") {
  std::thread([] {
    CHECK(pool_blocks_kept() == 0);
    // The first object may bring a batch of blocks from the depot with it, when an earlier case
    // left some there: counted from after it.
    auto a = make_pooled<Payload>();
    a->words[3] = 7;
    const void* where = a.get();
    const size_t kept = pool_blocks_kept();
    a.reset();
    if (kBypassed) {
      CHECK(pool_blocks_kept() == 0);
      return;
    }
    CHECK(pool_blocks_kept() == kept + 1);
    auto b = make_pooled<Payload>();
    CHECK(static_cast<const void*>(b.get()) == where);
    CHECK(b->words[3] == 0);  // constructed afresh
    CHECK(pool_blocks_kept() == kept);
  }).join();
}

TEST_CASE("make_pooled: a thread keeps a bounded number of blocks and frees them as it ends",
          "[object_pool]") {
  std::vector<std::shared_ptr<Payload>> made;
  for (int i = 0; i < 1000; ++i) made.push_back(make_pooled<Payload>());
  std::thread([&] {
    made.clear();  // dropped here: this thread's lists take them, up to their bound
    // A full list hands a batch to the process's depot, so it holds between the bound less a
    // batch and the bound.
    const size_t kept = pool_blocks_kept();
    if (kBypassed) {
      CHECK(kept == 0);
    } else {
      CHECK(kept <= ferry::detail::kPoolPerClass);
      CHECK(kept >= ferry::detail::kPoolPerClass - 32);
    }
  }).join();
  // The thread's lists went with it (LeakSanitizer, in the sanitizer runs, sees the rest).
  std::thread([] { CHECK(pool_blocks_kept() == 0); }).join();
}

TEST_CASE("make_pooled: blocks a thread frees past its bound reach a thread that makes objects",
          "[object_pool]") {
  if (kBypassed) return;
  struct Odd {  // a size class of its own in this test binary
    int64_t words[57] = {};
  };
  // One thread makes, another drops: the pattern of a caller's ops dropped by a group's worker.
  std::vector<std::shared_ptr<Odd>> made;
  std::vector<const void*> places;
  std::thread([&] {
    for (int i = 0; i < 1000; ++i) made.push_back(make_pooled<Odd>());
    for (const auto& m : made) places.push_back(m.get());
  }).join();
  std::thread([&] { made.clear(); }).join();  // past its bound: batches to the depot
  std::thread([&] {
    // This thread's lists start empty: its first object comes from the depot, one of the
    // blocks the other thread freed, not from operator new.
    auto again = make_pooled<Odd>();
    bool reused = false;
    for (const void* p : places) reused = reused || p == static_cast<const void*>(again.get());
    CHECK(reused);
  }).join();
}

TEST_CASE("make_pooled: objects larger than the classes come from operator new",
          "[object_pool]") {
  struct Big {
    char bytes[4 * ferry::detail::kPoolMaxBytes];
  };
  std::thread([] {
    auto big = make_pooled<Big>();
    big.reset();
    CHECK(pool_blocks_kept() == 0);
  }).join();
}

TEST_CASE("ThreadSpares: an object given back is taken again on its thread, with its capacity",
          "[object_pool]") {
  struct Scratch {
    std::vector<int64_t> rows;
  };
  std::thread([] {
    Scratch s = ThreadSpares<Scratch, 2>::take();
    s.rows.resize(1000);
    const int64_t* buffer = s.rows.data();
    s.rows.clear();
    ThreadSpares<Scratch, 2>::give(std::move(s));
    Scratch again = ThreadSpares<Scratch, 2>::take();
    CHECK(again.rows.empty());
    CHECK(again.rows.capacity() >= 1000);
    CHECK(again.rows.data() == buffer);
    // A third object given back while two are kept is dropped, not kept.
    ThreadSpares<Scratch, 2>::give(Scratch{});
    ThreadSpares<Scratch, 2>::give(Scratch{});
    ThreadSpares<Scratch, 2>::give(std::move(again));
    CHECK(ThreadSpares<Scratch, 2>::take().rows.capacity() == 0);
  }).join();
}
