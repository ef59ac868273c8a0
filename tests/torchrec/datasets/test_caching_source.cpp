// CachingSource: the inner source's batches on every pass, the inner source read once when a
// pass fits the budget, every pass when it does not, a pass cut short or failed started again,
// and batches that are the caller's own (changing one changes no later pass).
#include <ferry/collectives/torchrec/torchrec.h>

#include <catch2/catch.hpp>
#include "tests/torchrec/datasets/same_batch.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec;
using ferry::torchrec::testing::check_same;
using Catch::Matchers::Contains;

namespace {

// The synthetic source, counting its batches and resets; throws once at batch `fail_at` of
// the pass numbered `fail_in_pass` (1-based) when set.
class CountingSource : public BatchSource {
 public:
  CountingSource(const SyntheticCriteo& data, const ShardOptions& shard)
      : inner_(data, Split::Train, shard) {}
  std::optional<Batch> next_batch() override {
    if (fail_in_pass == passes_ && next_ == fail_at) {
      fail_in_pass = -1;
      throw InvalidArgument("CountingSource: batch " + std::to_string(next_) + " is broken");
    }
    std::optional<Batch> b = inner_.next_batch();
    if (b) {
      ++batches_made;
      ++next_;
    }
    return b;
  }
  int64_t num_batches() const override { return inner_.num_batches(); }
  void reset() override {
    ++resets;
    ++passes_;
    next_ = 0;
    inner_.reset();
  }
  int64_t batches_made = 0;
  int64_t resets = 0;
  int64_t fail_in_pass = -1, fail_at = -1;

 private:
  SyntheticCriteoSource inner_;
  int64_t passes_ = 1;
  int64_t next_ = 0;
};

SyntheticCriteo small_data() {
  SyntheticCriteoConfig c;
  c.num_sparse = 4;
  c.cardinalities = {50, 80, 120, 200};
  c.num_train = 6 * 64;
  return SyntheticCriteo(c);
}

ShardOptions shard() {
  ShardOptions o;
  o.batch_size = 64;
  return o;
}

// Every batch of a fresh synthetic source, for comparison.
std::vector<Batch> reference(const SyntheticCriteo& data) {
  SyntheticCriteoSource s(data, Split::Train, shard());
  std::vector<Batch> out;
  while (auto b = s.next_batch()) out.push_back(*b);
  return out;
}

// A CachingSource over a counting synthetic source, and the batches it must give.
struct Cached {
  explicit Cached(int64_t budget_bytes)
      : data(small_data()), want(reference(data)) {
    auto inner = std::make_unique<CountingSource>(data, shard());
    counting = inner.get();
    source = std::make_unique<CachingSource>(std::move(inner), budget_bytes);
  }
  SyntheticCriteo data;
  std::vector<Batch> want;
  CountingSource* counting;
  std::unique_ptr<CachingSource> source;
};

// One pass: checks each batch against `want` and returns how many there were.
size_t check_pass(BatchSource& s, const std::vector<Batch>& want) {
  s.reset();
  size_t n = 0;
  while (auto b = s.next_batch()) {
    REQUIRE(n < want.size());
    check_same(*b, want[n++]);
  }
  CHECK_FALSE(s.next_batch().has_value());  // the end stays the end
  return n;
}

}  // namespace

constexpr int64_t kRoomy = int64_t{64} << 20;

TEST_CASE("CachingSource: the inner source is read once when a pass fits", "[datasets]") {
  Cached c(kRoomy);
  CHECK(c.source->num_batches() == 6);
  for (int pass = 1; pass <= 3; ++pass) {
    INFO("pass " << pass);
    CHECK(check_pass(*c.source, c.want) == c.want.size());
    CHECK(c.source->serving_from_memory());
    CHECK(c.counting->batches_made == 6);  // the first pass's, no more
  }
  int64_t bytes = 0;
  for (const Batch& b : c.want) bytes += CachingSource::batch_bytes(b);
  CHECK(c.source->cached_bytes() == bytes);
  CHECK_FALSE(c.source->over_budget());
}

TEST_CASE("CachingSource: a batch changed in place changes no later pass", "[datasets]") {
  Cached c(kRoomy);
  for (int pass = 1; pass <= 3; ++pass) {
    c.source->reset();
    while (auto b = c.source->next_batch()) {
      b->dense.fill_(-7.0);
      b->labels.fill_(-7.0);
      Tensor values = b->sparse.values();  // a handle on the batch's storage
      values.fill_(0);
    }
  }
  CHECK(check_pass(*c.source, c.want) == c.want.size());
}

TEST_CASE("CachingSource: a pass beyond the budget is made again every time", "[datasets]") {
  // Room for two batches of six.
  Cached c(2 * CachingSource::batch_bytes(reference(small_data())[0]) + 16);
  for (int pass = 1; pass <= 3; ++pass) {
    INFO("pass " << pass);
    CHECK(check_pass(*c.source, c.want) == c.want.size());
    CHECK(c.source->over_budget());
    CHECK_FALSE(c.source->serving_from_memory());
    CHECK(c.source->cached_bytes() == 0);
    CHECK(c.counting->batches_made == 6 * pass);
  }
}

TEST_CASE("CachingSource: budget 0 only forwards", "[datasets]") {
  Cached c(0);
  CHECK(check_pass(*c.source, c.want) == c.want.size());
  CHECK(check_pass(*c.source, c.want) == c.want.size());
  CHECK(c.counting->batches_made == 12);
  CHECK_FALSE(c.source->serving_from_memory());
  CHECK_FALSE(c.source->over_budget());
  CHECK_THROWS_WITH(CachingSource(nullptr, 1), Contains("expected a source"));
  CHECK_THROWS_WITH(CachingSource(std::make_unique<CountingSource>(c.data, shard()), -1),
                    Contains("given -1"));
}

TEST_CASE("CachingSource: a pass cut short or failed is made again, then kept", "[datasets]") {
  Cached c(kRoomy);
  CachingSource& s = *c.source;
  SECTION("cut short by reset()") {
    s.reset();
    REQUIRE(s.next_batch().has_value());
    REQUIRE(s.next_batch().has_value());
    CHECK(check_pass(s, c.want) == c.want.size());  // starts over at the first batch
    CHECK(c.counting->batches_made == 2 + 6);
  }
  SECTION("an exception of the inner source") {
    c.counting->fail_in_pass = 1;
    c.counting->fail_at = 3;
    s.reset();
    for (int i = 0; i < 3; ++i) REQUIRE(s.next_batch().has_value());
    CHECK_THROWS_WITH(s.next_batch(), Contains("batch 3 is broken"));
    CHECK(s.cached_bytes() == 0);
    CHECK(check_pass(s, c.want) == c.want.size());
    CHECK(c.counting->batches_made == 3 + 6);
  }
  CHECK(s.serving_from_memory());
  const int64_t made = c.counting->batches_made;
  CHECK(check_pass(s, c.want) == c.want.size());
  CHECK(c.counting->batches_made == made);
}

TEST_CASE("CachingSource: a reset before anything is read leaves the inner source alone",
          "[datasets]") {
  Cached c(kRoomy);
  c.source->reset();
  c.source->reset();
  CHECK(c.counting->resets == 0);  // a loader thread below keeps the batches it made ahead
  REQUIRE(c.source->next_batch().has_value());
  c.source->reset();
  CHECK(c.counting->resets == 1);
}
