// Intra-op threads (intra_op.h): parallel_for covers its range once in contiguous chunks, run
// by the caller and its helpers at once, or by the caller alone with one thread, small ranges or
// inside a chunk; a chunk's exception reaches the caller; the thread count is bounded.
#include <ferry/runtime/error.h>
#include <ferry/runtime/intra_op.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

using ferry::detail::parallel_for;

namespace {

struct Threads {
  explicit Threads(int n) { ferry::set_intra_op_threads(n); }
  ~Threads() { ferry::set_intra_op_threads(1); }
};

// The chunks one parallel_for ran, and the threads that ran them.
struct Record {
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  std::set<std::thread::id> threads;
  void add(int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(mu);
    chunks.emplace_back(b, e);
    threads.insert(std::this_thread::get_id());
  }
  // Whether the chunks tile [0, n) exactly.
  bool tiles(int64_t n) {
    std::sort(chunks.begin(), chunks.end());
    int64_t next = 0;
    for (auto [b, e] : chunks) {
      if (b != next || e <= b) return false;
      next = e;
    }
    return next == n;
  }
};

}  // namespace

TEST_CASE("intra-op threads: chunks tile the range, one per thread at most", "[intra_op]") {
  CHECK(ferry::intra_op_threads() == 1);
  {
    Record r;  // one thread: the whole range on the caller
    parallel_for(1000, 10, [&](int64_t b, int64_t e) { r.add(b, e); });
    CHECK(r.chunks.size() == 1);
    CHECK(r.tiles(1000));
    CHECK(r.threads == std::set<std::thread::id>{std::this_thread::get_id()});
  }
  Threads threads(3);
  {
    // Three chunks on three threads at once: each waits (up to 10 s) until all three started,
    // which only helpers running beside the caller can bring about.
    Record r;
    std::atomic<int> started{0};
    parallel_for(1000, 10, [&](int64_t b, int64_t e) {
      ++started;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (started < 3 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
      r.add(b, e);
    });
    CHECK(r.tiles(1000));
    CHECK(r.threads.size() == 3);
  }
  for (int round = 0; round < 200; ++round) {  // the helpers are reused, job after job
    // Which threads take the chunks is up to timing: a helper may take all of them before the
    // caller looks for one.
    Record r;
    parallel_for(1000, 10, [&](int64_t b, int64_t e) { r.add(b, e); });
    REQUIRE(r.chunks.size() == 3);
    REQUIRE(r.tiles(1000));
  }
  Record few;  // 25 items in grains of 10: two chunks
  parallel_for(25, 10, [&](int64_t b, int64_t e) { few.add(b, e); });
  CHECK(few.chunks.size() == 2);
  CHECK(few.tiles(25));
  Record small;  // under two grains: the caller alone
  parallel_for(15, 10, [&](int64_t b, int64_t e) { small.add(b, e); });
  CHECK(small.chunks.size() == 1);
  CHECK(small.tiles(15));
  int calls = 0;
  parallel_for(0, 1, [&](int64_t, int64_t) { ++calls; });
  CHECK(calls == 0);
}

TEST_CASE("intra-op threads: a parallel_for inside a chunk runs on that thread; a chunk's "
          "exception reaches the caller", "[intra_op]") {
  Threads threads(2);
  std::atomic<int> inner_chunks{0};
  std::atomic<bool> inner_elsewhere{false};
  parallel_for(100, 10, [&](int64_t, int64_t) {
    const auto me = std::this_thread::get_id();
    parallel_for(100, 10, [&](int64_t, int64_t) {
      ++inner_chunks;
      if (std::this_thread::get_id() != me) inner_elsewhere = true;
    });
  });
  CHECK(inner_chunks == 2);  // one whole inner range per outer chunk
  CHECK_FALSE(inner_elsewhere);
  CHECK_THROWS_WITH(parallel_for(100, 10,
                                 [&](int64_t b, int64_t) {
                                   if (b > 0) throw std::runtime_error("chunk failed");
                                 }),
                    "chunk failed");
  // The helpers survive a failed job.
  std::atomic<int64_t> sum{0};
  parallel_for(100, 10, [&](int64_t b, int64_t e) { sum += e - b; });
  CHECK(sum == 100);
}

TEST_CASE("intra-op threads: the count is 1 to 256", "[intra_op]") {
  CHECK_THROWS_AS(ferry::set_intra_op_threads(0), ferry::InvalidArgument);
  CHECK_THROWS_WITH(ferry::set_intra_op_threads(257),
                    Catch::Matchers::Contains("set_intra_op_threads") &&
                        Catch::Matchers::Contains("257"));
  CHECK(ferry::intra_op_threads() == 1);
}
