// PrefetchingSource: the inner source's batches in its order over passes and resets, an
// exception carried to its position, early destruction with a full queue, capacity 1, and the
// Criteo TSV reader through the loader thread on two ranks' shards.
#include <ferry/collectives/torchrec/torchrec.h>

#include <catch2/catch.hpp>
#include "tests/torchrec/datasets/same_batch.h"

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec;
using ferry::torchrec::testing::check_same;
using Catch::Matchers::Contains;

namespace {

// Batches of one sample whose dense value is the batch's index in the pass; throws at
// `throw_at` (every pass) if set, and can take `delay` per batch.
class ScriptedSource : public BatchSource {
 public:
  explicit ScriptedSource(int64_t batches, std::optional<int64_t> throw_at = std::nullopt,
                          std::chrono::milliseconds delay = std::chrono::milliseconds(0))
      : batches_(batches), throw_at_(throw_at), delay_(delay) {}
  std::optional<Batch> next_batch() override {
    ++calls;
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    if (next_ >= batches_) return std::nullopt;
    const int64_t i = next_++;
    if (throw_at_ && i == *throw_at_) {
      throw InvalidArgument("ScriptedSource: batch " + std::to_string(i) + " is broken");
    }
    torchrec::detail::BatchBuilder builder(1, {"cat_0"}, 1);
    builder.add({static_cast<float>(i)}, {{i}}, static_cast<float>(i % 2));
    return builder.finish();
  }
  int64_t num_batches() const override { return batches_; }
  void reset() override {
    ++resets;
    next_ = 0;
  }
  std::atomic<int64_t> calls{0};
  int64_t resets = 0;

 private:
  int64_t batches_;
  std::optional<int64_t> throw_at_;
  std::chrono::milliseconds delay_;
  int64_t next_ = 0;
};

int64_t index_of(const Batch& b) { return static_cast<int64_t>(b.dense.get_flat(0)); }

// The index of every remaining batch, up to the end.
std::vector<int64_t> drain(BatchSource& source) {
  std::vector<int64_t> out;
  while (auto b = source.next_batch()) out.push_back(index_of(*b));
  return out;
}

std::vector<int64_t> iota(int64_t first, int64_t last) {  // [first, last)
  std::vector<int64_t> out;
  for (int64_t i = first; i < last; ++i) out.push_back(i);
  return out;
}

// Waits (sleeping, not spinning) until `calls` reaches `n` or 5 s pass.
bool wait_for_calls(const ScriptedSource& s, int64_t n) {
  for (int i = 0; i < 5000 && s.calls.load() < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return s.calls.load() >= n;
}

}  // namespace

TEST_CASE("PrefetchingSource: the inner batches in order, over passes and resets",
          "[datasets][prefetch]") {
  const int64_t capacity = GENERATE(1, 2, 4);
  CAPTURE(capacity);
  auto owned = std::make_unique<ScriptedSource>(10);
  ScriptedSource& inner = *owned;
  PrefetchingSource source(std::move(owned), capacity);
  CHECK(source.capacity() == capacity);
  CHECK(source.num_batches() == 10);
  // Part of a pass, then a reset in the middle: the new pass starts at batch 0, with nothing of
  // the old one in between.
  for (int64_t i = 0; i < 3; ++i) {
    auto b = source.next_batch();
    REQUIRE(b.has_value());
    CHECK(index_of(*b) == i);
  }
  source.reset();
  CHECK(inner.resets == 1);
  CHECK(drain(source) == iota(0, 10));
  CHECK_FALSE(source.next_batch().has_value());  // the end stays the end
  CHECK_FALSE(source.next_batch().has_value());
  source.reset();
  CHECK(drain(source) == iota(0, 10));
  CHECK(source.stats().batches == 23);
}

TEST_CASE("PrefetchingSource: the synthetic source's batches, bit for bit",
          "[datasets][prefetch]") {
  const SyntheticCriteo data({.num_sparse = 4, .cardinalities = {10, 100, 1000, 10000},
                              .num_train = 200, .num_test = 10, .seed = 9});
  const ShardOptions so{.batch_size = 16, .rank = 1, .world_size = 2, .drop_last = false,
                        .even_batches = false};
  SyntheticCriteoSource direct(data, Split::Train, so);
  SyntheticCriteoSource wrapped_inner(data, Split::Train, so);
  PrefetchingSource wrapped(wrapped_inner, 2);  // the referencing constructor
  REQUIRE(wrapped.num_batches() == direct.num_batches());
  for (int pass = 0; pass < 2; ++pass) {
    int64_t n = 0;
    while (auto expected = direct.next_batch()) {
      auto got = wrapped.next_batch();
      REQUIRE(got.has_value());
      check_same(*got, *expected);
      ++n;
    }
    CHECK(n == direct.num_batches());
    CHECK_FALSE(wrapped.next_batch().has_value());
    direct.reset();
    wrapped.reset();
  }
}

TEST_CASE("PrefetchingSource: an exception reaches the consumer where it happened",
          "[datasets][prefetch]") {
  const int64_t capacity = GENERATE(1, 3);
  CAPTURE(capacity);
  auto owned = std::make_unique<ScriptedSource>(8, 4);
  ScriptedSource& inner = *owned;
  PrefetchingSource source(std::move(owned), capacity);
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t i = 0; i < 4; ++i) {
      auto b = source.next_batch();
      REQUIRE(b.has_value());
      CHECK(index_of(*b) == i);
    }
    CHECK_THROWS_AS(source.next_batch(), InvalidArgument);
    // Again on every later call: nothing more is read from the broken source.
    CHECK_THROWS_WITH(source.next_batch(), Contains("batch 4 is broken"));
    CHECK(inner.calls.load() == 5 * (pass + 1));
    source.reset();  // and a reset starts over
  }
}

TEST_CASE("PrefetchingSource: the queue is bounded; destruction with a full queue",
          "[datasets][prefetch]") {
  const int64_t capacity = GENERATE(1, 2);
  CAPTURE(capacity);
  auto owned = std::make_unique<ScriptedSource>(1000);
  ScriptedSource& inner = *owned;
  {
    PrefetchingSource source(std::move(owned), capacity);
    // The thread fills the queue, then waits for space: it has called the inner source exactly
    // `capacity` times.
    REQUIRE(wait_for_calls(inner, capacity));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(inner.calls.load() == capacity);
    // Taking one makes room for exactly one more.
    auto b = source.next_batch();
    REQUIRE(b.has_value());
    CHECK(index_of(*b) == 0);
    REQUIRE(wait_for_calls(inner, capacity + 1));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(inner.calls.load() == capacity + 1);
    // A reset while the thread waits for space.
    source.reset();
    auto first = source.next_batch();
    REQUIRE(first.has_value());
    CHECK(index_of(*first) == 0);
    REQUIRE(wait_for_calls(inner, capacity + 1 + capacity + 1));
  }  // destroyed with a full queue and the thread waiting: joins
  // Destroyed at once, while the thread may be inside the inner source (slow batches).
  auto slow = std::make_unique<ScriptedSource>(100, std::nullopt, std::chrono::milliseconds(20));
  { PrefetchingSource source(std::move(slow), capacity); }
  // And right after the end of the data, with the thread gone.
  PrefetchingSource done(std::make_unique<ScriptedSource>(2), capacity);
  CHECK(drain(done) == iota(0, 2));
}

TEST_CASE("PrefetchingSource: waits are counted; arguments are checked", "[datasets][prefetch]") {
  // A slow inner source: the consumer waits for (at least) the first batch.
  PrefetchingSource slow(
      std::make_unique<ScriptedSource>(3, std::nullopt, std::chrono::milliseconds(30)), 2);
  CHECK(drain(slow) == iota(0, 3));
  const PrefetchingSource::Stats stats = slow.stats();
  CHECK(stats.batches == 3);
  CHECK(stats.waits >= 1);
  CHECK(stats.wait_seconds > 0.01);
  CHECK_THROWS_WITH(PrefetchingSource(std::make_unique<ScriptedSource>(3), 0),
                    Contains("capacity must be >= 1 batch, got 0"));
  CHECK_THROWS_WITH(PrefetchingSource(std::unique_ptr<BatchSource>(), 2),
                    Contains("null pointer"));
}

namespace {

// A small file in Criteo's TSV format: label, 13 integers, 26 hex categoricals, some empty;
// negative integers; line `bad_line` (1-based, 0 = none) has a categorical that is not hex.
void write_criteo_tsv(const std::string& path, int lines, int bad_line) {
  std::ofstream out(path);
  for (int line = 0; line < lines; ++line) {
    out << ((line * 7) % 3 == 0 ? 1 : 0);
    for (int i = 0; i < 13; ++i) {
      out << '\t';
      if ((line + i) % 5 == 0) continue;  // missing
      out << (i == 1 ? -(line % 4) : line * 13 + i * i);
    }
    for (int t = 0; t < 26; ++t) {
      out << '\t';
      if ((line * 3 + t) % 7 == 0) continue;  // missing
      if (line + 1 == bad_line && t == 5) {
        out << "12zz";
        continue;
      }
      std::ostringstream hex;
      hex << std::hex << (0x9e3779b1u * static_cast<unsigned>(line * 31 + t + 1));
      out << hex.str();
    }
    out << '\n';
  }
}

}  // namespace

TEST_CASE("PrefetchingSource: the Criteo TSV reader through the loader thread, two ranks",
          "[datasets][prefetch]") {
  const std::string path = "test_prefetching_source_criteo.tsv";
  write_criteo_tsv(path, 23, 0);
  std::vector<int64_t> cards = default_cardinalities(26);
  for (int64_t& c : cards) c = std::min<int64_t>(c, 5000);
  int64_t total = 0;
  for (int rank = 0; rank < 2; ++rank) {
    const ShardOptions so{.batch_size = 4, .rank = rank, .world_size = 2, .drop_last = false,
                          .even_batches = false};
    CriteoTsvSource direct({.path = path, .cardinalities = cards}, so);
    PrefetchingSource wrapped(
        std::make_unique<CriteoTsvSource>(CriteoTsvConfig{.path = path, .cardinalities = cards},
                                          so),
        2);
    CHECK(wrapped.num_batches() == direct.num_batches());
    for (int pass = 0; pass < 2; ++pass) {
      while (auto expected = direct.next_batch()) {
        auto got = wrapped.next_batch();
        REQUIRE(got.has_value());
        check_same(*got, *expected);
        total += pass == 0 ? got->size() : 0;
        // torchrec's transforms: log(v + 3) dense values, one id per bag below the table size.
        const std::vector<float> dense = got->dense.to_vector<float>();
        for (float v : dense) CHECK((std::isfinite(v) && v >= 0));
        CHECK(got->sparse.values().numel() == 26 * got->size());
      }
      CHECK_FALSE(wrapped.next_batch().has_value());
      direct.reset();
      wrapped.reset();
    }
  }
  CHECK(total == 23);  // 6 batches (the last of 3 lines): ranks 0 and 1 read 3 each

  // A bad line: the error names it, and comes through the loader thread at the batch that
  // holds it (line 14 is in global batch 3, rank 1's second), after the batches before it.
  write_criteo_tsv(path, 23, 14);
  const ShardOptions so{.batch_size = 4, .rank = 1, .world_size = 2, .drop_last = false,
                        .even_batches = false};
  CriteoTsvSource direct({.path = path, .cardinalities = cards}, so);
  REQUIRE(direct.next_batch().has_value());
  CHECK_THROWS_WITH(direct.next_batch(), Contains("line 14") && Contains("bad categorical"));
  PrefetchingSource wrapped(
      std::make_unique<CriteoTsvSource>(CriteoTsvConfig{.path = path, .cardinalities = cards},
                                        so));
  REQUIRE(wrapped.next_batch().has_value());
  CHECK_THROWS_WITH(wrapped.next_batch(), Contains("line 14") && Contains("12zz"));
  CHECK_THROWS_WITH(wrapped.next_batch(), Contains("line 14"));
  std::remove(path.c_str());
}

TEST_CASE("PrefetchingSource: an idle-priority loader makes the same batches on a SCHED_IDLE thread",
          "[datasets][prefetch]") {
  // The inner source records the scheduling class of the thread that calls it.
  class PolicyRecordingSource : public ScriptedSource {
   public:
    using ScriptedSource::ScriptedSource;
    std::optional<Batch> next_batch() override {
      policy = sched_getscheduler(0);
      return ScriptedSource::next_batch();
    }
    std::atomic<int> policy{-1};
  };
  PolicyRecordingSource idle_inner(5), normal_inner(5);
  PrefetchingSource idle(idle_inner, 2, LoaderPriority::Idle);
  PrefetchingSource normal(normal_inner, 2);
  CHECK(idle.priority() == LoaderPriority::Idle);
  CHECK(drain(idle) == iota(0, 5));
  CHECK(drain(normal) == iota(0, 5));
  CHECK(idle_inner.policy.load() == SCHED_IDLE);
  CHECK(normal_inner.policy.load() == SCHED_OTHER);
  CHECK(sched_getscheduler(0) == SCHED_OTHER);  // the consumer's thread is left as it was
}
