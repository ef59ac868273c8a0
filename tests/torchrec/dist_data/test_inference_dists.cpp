// The single-process inference dists: KJTOneToAll splits a KJT by feature for the ranks of a local
// world, EmbeddingsAllToOne / EmbeddingsAllToOneReduce / SeqEmbeddingsAllToOne merge their results;
// plus the whole sharded-inference round trip on a local world of threads.
#include <ferry/autograd/ops.h>
#include <ferry/collectives/run_ranks.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/jagged_test_util.h"

#include <catch2/catch.hpp>

#include <mutex>

using namespace ferry;
using namespace ferry::torchrec;
using namespace ferry::torchrec::testing;

namespace {

KeyedJaggedTensor abc() {
  // keys a, b, c; stride 2; a [1, 2], b [0, 1], c [2, 0]
  return KeyedJaggedTensor::from_lengths_sync({"a", "b", "c"}, i64({10, 11, 12, 20, 30, 31}),
                                              i64({1, 2, 0, 1, 2, 0}));
}

Variable var(std::vector<double> v, int64_t rows, int64_t cols) {
  return Variable(from_vector<double>(v, {rows, cols}), true);
}

}  // namespace

TEST_CASE("KJTOneToAll splits the KJT by feature, one part per rank", "[torchrec][dists][inference]") {
  const KeyedJaggedTensor kjt = abc();
  const std::vector<KeyedJaggedTensor> parts = KJTOneToAll({2, 0, 1}, 3).forward(kjt).wait();
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].keys() == std::vector<std::string>{"a", "b"});
  CHECK(iv(parts[0].values()) == V{10, 11, 12, 20});
  CHECK(parts[1].num_keys() == 0);
  CHECK(parts[2].keys() == std::vector<std::string>{"c"});
  CHECK(iv(parts[2].values()) == V{30, 31});
  CHECK(iv(parts[2].lengths()) == V{2, 0});
  CHECK(parts[2].stride() == 2);
  CHECK_THROWS_WITH(KJTOneToAll({2, 2}, 2).forward(kjt).wait(),
                    Catch::Contains("KJTOneToAll") && Catch::Contains("cover 4 keys, the KJT has 3"));
  CHECK_THROWS_WITH(KJTOneToAll({3}, 2), Catch::Contains("1 entries for world_size 2"));
  CHECK_THROWS_WITH(KJTOneToAll({3, -1, 1}, 3), Catch::Contains("negative"));
  CHECK_THROWS_WITH(KJTOneToAll({}, 0), Catch::Contains("world_size 0 must be >= 1"));
}

TEST_CASE("EmbeddingsAllToOne, EmbeddingsAllToOneReduce, SeqEmbeddingsAllToOne merge per-rank "
          "results",
          "[torchrec][dists][inference]") {
  const Variable p0 = var({1, 2, 3, 4}, 2, 2), p1 = var({5, 6}, 2, 1);
  // pooled: side by side
  const Variable y = EmbeddingsAllToOne(2, 1).forward({p0, p1});
  CHECK(dv(y.value()) == std::vector<double>{1, 2, 5, 3, 4, 6});
  backward({y}, {from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3})});
  CHECK(dv(p0.grad()) == std::vector<double>{1, 2, 4, 5});
  CHECK(dv(p1.grad()) == std::vector<double>{3, 6});
  // sequence: stacked
  const Variable s = EmbeddingsAllToOne(3, 0).forward({var({1, 2}, 1, 2), var({3, 4, 5, 6}, 2, 2)});
  CHECK(s.value().shape() == Shape{3, 2});
  CHECK(dv(s.value()) == std::vector<double>{1, 2, 3, 4, 5, 6});
  // world size 1: the tensor itself
  CHECK(EmbeddingsAllToOne(1, 1).forward({p0}).value().raw_data() == p0.value().raw_data());
  CHECK_THROWS_WITH(EmbeddingsAllToOne(1, 1).forward({p0, p0}),
                    Catch::Contains("EmbeddingsAllToOne: got 2 tensors, expected 1 to 1"));
  CHECK_THROWS_WITH(EmbeddingsAllToOne(2, 2).forward({p0, p1}), Catch::Contains("has no dim 2"));
  // row-wise: summed
  const Variable r = EmbeddingsAllToOneReduce(2).forward({p0, var({10, 20, 30, 40}, 2, 2)});
  CHECK(dv(r.value()) == std::vector<double>{11, 22, 33, 44});
  CHECK_THROWS_WITH(EmbeddingsAllToOneReduce(2).forward({p0}),
                    Catch::Contains("got 1 tensors, expected exactly 2"));
  CHECK_THROWS_WITH(EmbeddingsAllToOneReduce(2).forward({p0, p1}),
                    Catch::Contains("tensor 1 has shape [2, 1], tensor 0 [2, 2]"));
  // sequence list: as given
  const std::vector<Variable> l = SeqEmbeddingsAllToOne(2).forward({p0, p1});
  REQUIRE(l.size() == 2);
  CHECK(l[1].value().raw_data() == p1.value().raw_data());
  CHECK_THROWS_WITH(SeqEmbeddingsAllToOne(1).forward({p0, p1}), Catch::Contains("expected 1 to 1"));
}

TEST_CASE("sharded inference on a local world: KJTOneToAll -> per-rank pooled lookup -> "
          "EmbeddingsAllToOne",
          "[torchrec][dists][inference]") {
  // Rank k of a local world of 2 looks up its part: the pooled "embedding" of a bag is
  // [sum of ids, count] per key. The caller merges the parts in rank order.
  const KeyedJaggedTensor kjt = abc();
  const std::vector<KeyedJaggedTensor> parts = KJTOneToAll({2, 1}, 2).forward(kjt).wait();
  std::vector<Variable> pooled(2);
  std::mutex mu;
  run_ranks(2, [&](Group& g) {
    const KeyedJaggedTensor& mine = parts[static_cast<size_t>(g.rank())];
    std::vector<double> rows(static_cast<size_t>(mine.stride() * 2 * mine.num_keys()), 0.0);
    const V len = iv(mine.lengths()), val = iv(mine.values());
    size_t v = 0;
    for (int64_t t = 0; t < mine.num_keys(); ++t)
      for (int64_t b = 0; b < mine.stride(); ++b)
        for (int64_t j = 0; j < len[static_cast<size_t>(t * mine.stride() + b)]; ++j) {
          rows[static_cast<size_t>(b * 2 * mine.num_keys() + 2 * t)] += static_cast<double>(val[v++]);
          rows[static_cast<size_t>(b * 2 * mine.num_keys() + 2 * t + 1)] += 1;
        }
    std::lock_guard<std::mutex> lock(mu);
    pooled[static_cast<size_t>(g.rank())] =
        Variable(from_vector<double>(rows, {mine.stride(), 2 * mine.num_keys()}));
  });
  const Variable y = EmbeddingsAllToOne(2, 1).forward(pooled);
  // sample 0: a [10] b [] c [30, 31]; sample 1: a [11, 12] b [20] c []
  CHECK(dv(y.value()) == std::vector<double>{10, 1, 0, 0, 61, 2, 23, 2, 20, 1, 0, 0});
}
