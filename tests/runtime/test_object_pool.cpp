// The per-thread object pool behind make_pooled (tensors' control blocks, tape nodes) and the
// per-thread spares of ThreadSpares: a dropped object's block is the next one of its size class
// on the thread that dropped it, lists are bounded, and a thread's lists go with the thread.
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
    auto a = make_pooled<Payload>();
    a->words[3] = 7;
    const void* where = a.get();
    a.reset();
    if (kBypassed) {
      CHECK(pool_blocks_kept() == 0);
      return;
    }
    CHECK(pool_blocks_kept() == 1);
    auto b = make_pooled<Payload>();
    CHECK(static_cast<const void*>(b.get()) == where);
    CHECK(b->words[3] == 0);  // constructed afresh
    CHECK(pool_blocks_kept() == 0);
  }).join();
}

TEST_CASE("make_pooled: a thread keeps a bounded number of blocks and frees them as it ends",
          "[object_pool]") {
  std::vector<std::shared_ptr<Payload>> made;
  for (int i = 0; i < 1000; ++i) made.push_back(make_pooled<Payload>());
  std::thread([&] {
    made.clear();  // dropped here: this thread's lists take them, up to their bound
    CHECK(pool_blocks_kept() == (kBypassed ? 0 : ferry::detail::kPoolPerClass));
  }).join();
  // The thread's lists went with it (LeakSanitizer, in the sanitizer runs, sees the rest).
  std::thread([] { CHECK(pool_blocks_kept() == 0); }).join();
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
