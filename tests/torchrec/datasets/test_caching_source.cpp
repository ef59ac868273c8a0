// CachingSource: the inner source's batches on every pass, the inner source read once when a
// pass fits the budget, every pass when it does not, a pass cut short or failed started again,
// and batches that are the caller's own (changing one changes no later pass).
#include <ferry/collectives/torchrec/torchrec.h>

#include <catch2/catch.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec;
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

void check_same(const Batch& a, const Batch& b) {
  CHECK(equal(a.dense, b.dense));
  CHECK(equal(a.labels, b.labels));
  CHECK(a.sparse.keys() == b.sparse.keys());
  CHECK(a.sparse.stride() == b.sparse.stride());
  CHECK(equal(a.sparse.values(), b.sparse.values()));
  CHECK(equal(a.sparse.lengths(), b.sparse.lengths()));
}

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

TEST_CASE("CachingSource: the inner source is read once when a pass fits", "[datasets]") {
  const SyntheticCriteo data = small_data();
  const std::vector<Batch> want = reference(data);
  auto inner = std::make_unique<CountingSource>(data, shard());
  CountingSource& counting = *inner;
  CachingSource s(std::move(inner), int64_t{64} << 20);
  CHECK(s.num_batches() == 6);
  for (int pass = 1; pass <= 3; ++pass) {
    INFO("pass " << pass);
    CHECK(check_pass(s, want) == want.size());
    CHECK(s.serving_from_memory());
    CHECK(counting.batches_made == 6);  // the first pass's, no more
  }
  int64_t bytes = 0;
  for (const Batch& b : want) bytes += CachingSource::batch_bytes(b);
  CHECK(s.cached_bytes() == bytes);
  CHECK_FALSE(s.over_budget());
}

TEST_CASE("CachingSource: a batch changed in place changes no later pass", "[datasets]") {
  const SyntheticCriteo data = small_data();
  const std::vector<Batch> want = reference(data);
  CachingSource s(std::make_unique<SyntheticCriteoSource>(data, Split::Train, shard()),
                  int64_t{64} << 20);
  for (int pass = 1; pass <= 3; ++pass) {
    s.reset();
    while (auto b = s.next_batch()) {
      b->dense.fill_(-7.0);
      b->labels.fill_(-7.0);
      Tensor values = b->sparse.values();  // a handle on the batch's storage
      values.fill_(0);
    }
  }
  CHECK(check_pass(s, want) == want.size());
}

TEST_CASE("CachingSource: a pass beyond the budget is made again every time", "[datasets]") {
  const SyntheticCriteo data = small_data();
  const std::vector<Batch> want = reference(data);
  auto inner = std::make_unique<CountingSource>(data, shard());
  CountingSource& counting = *inner;
  // Room for two batches of six.
  CachingSource s(std::move(inner), 2 * CachingSource::batch_bytes(want[0]) + 16);
  for (int pass = 1; pass <= 3; ++pass) {
    INFO("pass " << pass);
    CHECK(check_pass(s, want) == want.size());
    CHECK(s.over_budget());
    CHECK_FALSE(s.serving_from_memory());
    CHECK(s.cached_bytes() == 0);
    CHECK(counting.batches_made == 6 * pass);
  }
}

TEST_CASE("CachingSource: budget 0 only forwards", "[datasets]") {
  const SyntheticCriteo data = small_data();
  const std::vector<Batch> want = reference(data);
  auto inner = std::make_unique<CountingSource>(data, shard());
  CountingSource& counting = *inner;
  CachingSource s(std::move(inner), 0);
  CHECK(check_pass(s, want) == want.size());
  CHECK(check_pass(s, want) == want.size());
  CHECK(counting.batches_made == 12);
  CHECK_FALSE(s.serving_from_memory());
  CHECK_FALSE(s.over_budget());
  CHECK_THROWS_WITH(CachingSource(nullptr, 1), Contains("expected a source"));
  CHECK_THROWS_WITH(CachingSource(std::make_unique<CountingSource>(data, shard()), -1),
                    Contains("given -1"));
}

TEST_CASE("CachingSource: a pass cut short or failed is made again, then kept", "[datasets]") {
  const SyntheticCriteo data = small_data();
  const std::vector<Batch> want = reference(data);
  auto inner = std::make_unique<CountingSource>(data, shard());
  CountingSource& counting = *inner;
  CachingSource s(std::move(inner), int64_t{64} << 20);

  SECTION("cut short by reset()") {
    s.reset();
    REQUIRE(s.next_batch().has_value());
    REQUIRE(s.next_batch().has_value());
    CHECK(check_pass(s, want) == want.size());  // starts over at the first batch
    CHECK(counting.batches_made == 2 + 6);
  }
  SECTION("an exception of the inner source") {
    counting.fail_in_pass = 1;
    counting.fail_at = 3;
    s.reset();
    for (int i = 0; i < 3; ++i) REQUIRE(s.next_batch().has_value());
    CHECK_THROWS_WITH(s.next_batch(), Contains("batch 3 is broken"));
    CHECK(s.cached_bytes() == 0);
    CHECK(check_pass(s, want) == want.size());
    CHECK(counting.batches_made == 3 + 6);
  }
  CHECK(s.serving_from_memory());
  const int64_t made = counting.batches_made;
  CHECK(check_pass(s, want) == want.size());
  CHECK(counting.batches_made == made);
}

TEST_CASE("CachingSource: a reset before anything is read leaves the inner source alone",
          "[datasets]") {
  const SyntheticCriteo data = small_data();
  auto inner = std::make_unique<CountingSource>(data, shard());
  CountingSource& counting = *inner;
  CachingSource s(std::move(inner), int64_t{64} << 20);
  s.reset();
  s.reset();
  CHECK(counting.resets == 0);  // a loader thread below keeps the batches it made ahead
  REQUIRE(s.next_batch().has_value());
  s.reset();
  CHECK(counting.resets == 1);
}
