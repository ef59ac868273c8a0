// Batches drawn in a rank's waits (SyntheticCriteoSource's fill_waits): a batch built piece by
// piece equals the one built at once; a source that fills waits yields the plain source's
// batches whatever pieces ran between its calls, over resets; its hook goes with it; and a
// collective's wait on the local transport really draws the next batch (the peer joins only
// once it has been drawn, so the test cannot pass by timing).
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/run_ranks.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include <ferry/runtime/idle_work.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <thread>

using namespace ferry;
using namespace ferry::torchrec;

namespace {

SyntheticCriteo small_data() {
  return SyntheticCriteo({.num_sparse = 4, .cardinalities = {100, 1000, 10000, 50},
                          .num_train = 200, .num_test = 40, .seed = 7});
}

bool same_batch(const Batch& a, const Batch& b) {
  return equal(a.dense, b.dense) && equal(a.labels, b.labels) &&
         a.sparse.keys() == b.sparse.keys() && equal(a.sparse.values(), b.sparse.values()) &&
         equal(a.sparse.lengths(), b.sparse.lengths());
}

}  // namespace

TEST_CASE("SyntheticCriteo::BatchInProgress: pieces of any size build batch()'s batch",
          "[datasets][loader]") {
  const SyntheticCriteo data = small_data();
  SyntheticCriteo::BatchInProgress b(data);
  for (int64_t piece : {1, 3, 8, 64}) {
    INFO("piece " << piece);
    b.start(Split::Train, 17, 50);
    CHECK(b.started());
    int64_t drawn = 0;
    while (!b.done()) drawn += b.advance(piece);
    CHECK(drawn == 50);
    CHECK(b.advance(piece) == 0);
    CHECK(same_batch(b.finish(), data.batch(Split::Train, 17, 50)));
    CHECK_FALSE(b.started());
  }
  b.start(Split::Test, 0, 40);  // finish() draws what is left
  b.advance(5);
  CHECK(same_batch(b.finish(), data.batch(Split::Test, 0, 40)));
  CHECK_THROWS_AS(b.start(Split::Test, 10, 31), InvalidArgument);
}

TEST_CASE("SyntheticCriteoSource with fill_waits: the plain source's batches, whatever ran "
          "between its calls", "[datasets][loader]") {
  const SyntheticCriteo data = small_data();
  const ShardOptions so{.batch_size = 16, .rank = 1, .world_size = 2};
  SyntheticCriteoSource plain(data, Split::Train, so);
  SyntheticCriteoSource filled(data, Split::Train, so, /*fill_waits=*/true);
  REQUIRE(filled.num_batches() == plain.num_batches());
  for (int pass = 0; pass < 2; ++pass) {
    plain.reset();
    filled.reset();
    for (int64_t i = 0;; ++i) {
      std::optional<Batch> want = plain.next_batch();
      std::optional<Batch> got = filled.next_batch();
      REQUIRE(want.has_value() == got.has_value());
      if (!want) break;
      CHECK(same_batch(*got, *want));
      // Some pieces of the next batch, as a wait would run them: none, part of it, all of it.
      for (int64_t k = 0; k < i % 4 && ferry::detail::run_idle_work(); ++k) {
      }
      if (i % 3 == 2) {
        while (ferry::detail::run_idle_work()) {
        }
      }
    }
    CHECK_FALSE(ferry::detail::run_idle_work());  // the pass is over: nothing left to draw
  }
  CHECK(filled.samples_drawn_in_waits() > 0);
  CHECK(plain.samples_drawn_in_waits() == 0);
}

TEST_CASE("SyntheticCriteoSource with fill_waits: a reset drops the batch in progress; the hook "
          "leaves with the source", "[datasets][loader]") {
  const SyntheticCriteo data = small_data();
  const ShardOptions so{.batch_size = 10, .rank = 0, .world_size = 1};
  {
    SyntheticCriteoSource filled(data, Split::Train, so, true);
    REQUIRE(filled.next_batch().has_value());
    CHECK(ferry::detail::run_idle_work());  // a piece of batch 1
    filled.reset();
    std::optional<Batch> first = filled.next_batch();
    REQUIRE(first.has_value());
    CHECK(same_batch(*first, data.batch(Split::Train, 0, 10)));
  }
  CHECK_FALSE(ferry::detail::run_idle_work());
}

TEST_CASE("SyntheticCriteoSource with fill_waits: a second source (an evaluation's) takes the "
          "thread's waits only until the first one is called again", "[datasets][loader]") {
  const SyntheticCriteo data = small_data();
  SyntheticCriteoSource train(data, Split::Train, {.batch_size = 10, .rank = 0, .world_size = 1},
                              true);
  REQUIRE(train.next_batch().has_value());
  {
    SyntheticCriteoSource test(data, Split::Test, {.batch_size = 10, .rank = 0, .world_size = 1},
                               true);
    REQUIRE(test.next_batch().has_value());
    CHECK(ferry::detail::run_idle_work());  // a piece of the test source's batch 1
    CHECK(test.samples_drawn_in_waits() == 8);
    CHECK(train.samples_drawn_in_waits() == 0);
    REQUIRE(train.next_batch().has_value());  // takes the thread's waits back
  }
  // The test source went away without removing the training source's hook.
  CHECK(ferry::detail::run_idle_work());
  CHECK(train.samples_drawn_in_waits() == 8);
}

TEST_CASE("SyntheticCriteoSource with fill_waits: a collective's wait draws the next batch",
          "[datasets][loader]") {
  const SyntheticCriteo data = small_data();
  std::atomic<SyntheticCriteoSource*> rank0_source{nullptr};
  std::atomic<bool> peer_gave_up{false};
  int64_t drawn_in_waits = -1;
  bool batches_match = false;
  run_ranks(2, [&](Group& world) {
    const ShardOptions so{.batch_size = 16, .rank = world.rank(), .world_size = 2};
    if (world.rank() == 0) {
      SyntheticCriteoSource source(data, Split::Train, so, true);
      std::optional<Batch> b0 = source.next_batch();  // batch 1 now waits to be drawn
      rank0_source = &source;
      // Rank 1 joins only once this wait has drawn all of batch 1.
      all_reduce(ones({4}), world).wait();
      drawn_in_waits = source.samples_drawn_in_waits();
      std::optional<Batch> b1 = source.next_batch();
      batches_match = b0 && b1 &&
                      same_batch(*b1, data.batch(Split::Train, ShardSchedule(200, so).first_sample(1), 16));
      all_reduce(ones({4}), world).wait();  // rank 1 reads the source until here
    } else {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (rank0_source.load() == nullptr || rank0_source.load()->samples_drawn_in_waits() < 16) {
        if (std::chrono::steady_clock::now() > deadline) {
          peer_gave_up = true;  // the wait drew nothing: fail instead of hanging
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      all_reduce(ones({4}), world).wait();
      all_reduce(ones({4}), world).wait();
    }
  });
  CHECK_FALSE(peer_gave_up);
  CHECK(drawn_in_waits == 16);
  CHECK(batches_match);
}
