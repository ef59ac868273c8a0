// The large all_reduce's choice of stores (collectives/shm/store_chooser.h) on made-up costs:
// each kind tried until it has a cost, then the cheaper one with the other tried for kTryRun
// ops in a row in every kTryEvery; a swap of the costs followed within a few ops (into the kind
// tried rarely, within a few tries); one slow op not followed; the first op after a change of
// kind not counted. And the streaming copy against memcpy at every alignment of both ends and
// every length around a line, with the bytes beside the destination untouched.
#include <ferry/collectives/shm/store_chooser.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

using ferry::detail::shm::stream_copy;
using ferry::detail::shm::StoreChooser;
using ferry::detail::shm::StoreChoosers;

namespace {

constexpr size_t kBytes = 1 << 20;

// Runs `ops` ops whose stores cost `cached` or `streaming` ns per byte; returns how many
// streamed.
int run(StoreChooser& c, int ops, double cached, double streaming) {
  int streamed = 0;
  for (int i = 0; i < ops; ++i) {
    const bool s = c.next_streaming();
    streamed += s ? 1 : 0;
    c.record(s, static_cast<uint64_t>((s ? streaming : cached) * kBytes), kBytes);
  }
  return streamed;
}

}  // namespace

TEST_CASE("store chooser: each kind until it has a cost, then the cheaper, the other tried now "
          "and then") {
  StoreChooser c;
  std::vector<bool> picks;
  for (int i = 0; i < 64; ++i) {
    const bool s = c.next_streaming();
    picks.push_back(s);
    c.record(s, static_cast<uint64_t>((s ? 2.0 : 1.0) * kBytes), kBytes);
  }
  // Ops 0 and 1 ordinary (the first has no op before it to follow), 2 and 3 streaming (the
  // first of them follows an ordinary one): then each kind has a cost.
  const uint32_t tries_from = StoreChooser::kTryEvery - StoreChooser::kTryRun;
  for (uint32_t i = 0; i < 64; ++i) {
    INFO("op " << i);
    CHECK(picks[i] == (i == 2 || i == 3 || i % StoreChooser::kTryEvery >= tries_from));
  }
  CHECK(c.cost(false) == Approx(1.0));
  CHECK(c.cost(true) == Approx(2.0));
}

TEST_CASE("store chooser: the first op after a change of kind does not count") {
  // Each kind's first op after the other costs what the other left behind (here: a try of
  // ordinary stores after streaming ones is cheap, the ordinary ones after it dear). Counted,
  // those first ops would make ordinary stores look cheaper than streaming ones.
  StoreChooser c;
  bool last = false;
  int streamed = 0;
  for (int i = 0; i < 8 * static_cast<int>(StoreChooser::kTryEvery); ++i) {
    const bool s = c.next_streaming();
    const bool first_of_run = i > 0 && s != last;
    const double cost = s ? 2.0 : (first_of_run ? 0.5 : 4.0);
    c.record(s, static_cast<uint64_t>(cost * kBytes), kBytes);
    if (i >= 2 * static_cast<int>(StoreChooser::kTryEvery)) streamed += s ? 1 : 0;
    last = s;
  }
  // Streaming throughout but for the tries of ordinary stores.
  CHECK(streamed == 6 * static_cast<int>(StoreChooser::kTryEvery - StoreChooser::kTryRun));
  CHECK(c.cost(false) == Approx(4.0));
}

TEST_CASE("store chooser: follows a swap of the costs, both ways, and not one slow op") {
  StoreChooser c;
  run(c, 40, 1.0, 2.0);
  // Ordinary stores turn 5x dearer: streaming within a few ops.
  int streamed = 0;
  for (int i = 0; i < 8; ++i) {
    const bool s = c.next_streaming();
    c.record(s, static_cast<uint64_t>((s ? 2.0 : 5.0) * kBytes), kBytes);
    if (i >= 5) streamed += s ? 1 : 0;
  }
  CHECK(streamed == 3);
  CHECK(run(c, 40, 5.0, 2.0) >= 38);
  // And back: the ordinary stores' cost is seen again at the tries, a few of them.
  run(c, 4 * StoreChooser::kTryEvery, 1.0, 2.0);
  CHECK(run(c, 2 * StoreChooser::kTryEvery, 1.0, 2.0) == 2 * StoreChooser::kTryRun);
  // One op 10x slower than the rest (a preemption) does not switch.
  const bool s = c.next_streaming();
  REQUIRE_FALSE(s);
  c.record(false, 10 * kBytes, kBytes);
  CHECK(run(c, StoreChooser::kTryEvery, 1.0, 2.0) == StoreChooser::kTryRun);
}

TEST_CASE("store chooser: sizes and forms are chosen for apart") {
  StoreChoosers all;
  CHECK(&all.of(1 << 20, false) == &all.of((2 << 20) - 1, false));
  CHECK(&all.of(1 << 20, false) != &all.of(2 << 20, false));
  CHECK(&all.of(1 << 20, false) != &all.of(1 << 20, true));
  CHECK(&all.of(0, false) == &all.of(1, false));
}

TEST_CASE("stream_copy: the bytes of memcpy at every alignment, nothing beside") {
  std::vector<unsigned char> from(400), to(480), want(480);
  for (size_t i = 0; i < from.size(); ++i) from[i] = static_cast<unsigned char>(i * 7 + 1);
  for (size_t src = 0; src < 17; ++src) {
    for (size_t dst = 0; dst < 17; ++dst) {
      for (size_t n = 0; n <= 300; ++n) {
        std::memset(to.data(), 0xEE, to.size());
        std::memset(want.data(), 0xEE, want.size());
        std::memcpy(want.data() + 32 + dst, from.data() + src, n);
        stream_copy(to.data() + 32 + dst, from.data() + src, n);
        if (to != want) FAIL("differs at source offset " << src << ", destination offset "
                                                        << dst << ", " << n << " bytes");
      }
    }
  }
  std::vector<unsigned char> big(kBytes + 3), copy(kBytes + 3);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<unsigned char>(i % 251);
  stream_copy(copy.data(), big.data(), big.size());
  CHECK(copy == big);
}
