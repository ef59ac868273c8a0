// The KJT's wire form (kjt_dist.h): labels, per-destination splits, get_recat, and
// kjt_dist_init on buffers laid out exactly as the two-phase all-to-all will deliver them
// (simulated in process here, from kjt_dist_tensors / kjt_dist_splits alone).
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/jagged_test_util.h"

#include <catch2/catch.hpp>

#include <random>

using namespace ferry;
using namespace ferry::torchrec;
using namespace ferry::torchrec::testing;
using Catch::Matchers::Contains;

namespace {

// What rank `me` receives from every source in phase 2, labels in order, source-major.
std::vector<Tensor> received(const std::vector<KeyedJaggedTensor>& inputs,
                             const std::vector<int64_t>& key_splits, size_t me) {
  std::vector<std::vector<Tensor>> per_label;
  for (const KeyedJaggedTensor& kjt : inputs) {
    std::vector<Tensor> bufs = kjt_dist_tensors(kjt);
    std::vector<std::vector<int64_t>> counts = kjt_dist_splits(kjt, key_splits);
    per_label.resize(bufs.size());
    for (size_t l = 0; l < bufs.size(); ++l) {
      int64_t start = 0;
      for (size_t j = 0; j < me; ++j) start += counts[l][j];
      per_label[l].push_back(bufs[l].narrow(0, start, counts[l][me]));
    }
  }
  std::vector<Tensor> out;
  for (auto& pieces : per_label) out.push_back(cat(pieces, 0));
  return out;
}

// The all-to-all's result on every rank.
std::vector<KeyedJaggedTensor> simulate_a2a(const std::vector<KeyedJaggedTensor>& inputs,
                                            const std::vector<int64_t>& key_splits,
                                            int64_t stagger = 1) {
  const int64_t W = static_cast<int64_t>(inputs.size());
  std::vector<int64_t> stride_per_rank;
  for (const KeyedJaggedTensor& k : inputs) stride_per_rank.push_back(k.stride());
  std::vector<KeyedJaggedTensor> out;
  int64_t k0 = 0;
  for (int64_t me = 0; me < W; ++me) {
    std::vector<std::string> keys(inputs[0].keys().begin() + k0,
                                  inputs[0].keys().begin() + k0 + key_splits[me]);
    k0 += key_splits[me];
    out.push_back(kjt_dist_init(keys, received(inputs, key_splits, me),
                                inputs[0].variable_stride_per_key(), W,
                                get_recat(key_splits[me], W, stagger), stride_per_rank));
  }
  return out;
}

// ids: A0..A4 = 100..104, B0..B4 = 200..204, C0..C3 = 300..303
KeyedJaggedTensor docs_example_rank0(bool weighted = false) {
  V values{100, 101, 102, 200, 201, 300, 301};
  Tensor w;
  if (weighted) {
    std::vector<double> wd;
    for (int64_t v : values) wd.push_back(v / 1000.0);
    w = from_vector(wd);
  }
  return KeyedJaggedTensor::from_lengths_sync({"A", "B", "C"}, i64(values),
                                              i64({1, 0, 2, 0, 1, 1, 1, 1, 0}), w);
}
KeyedJaggedTensor docs_example_rank1(bool weighted = false) {
  V values{103, 104, 202, 203, 204, 302, 303};
  Tensor w;
  if (weighted) {
    std::vector<double> wd;
    for (int64_t v : values) wd.push_back(v / 1000.0);
    w = from_vector(wd);
  }
  return KeyedJaggedTensor::from_lengths_sync({"A", "B", "C"}, i64(values),
                                              i64({1, 1, 0, 0, 1, 2, 1, 1, 0}), w);
}

}  // namespace

TEST_CASE("get_recat: worked orders with and without stagger, and a bad stagger", "[kjt_dist]") {
  CHECK(get_recat(2, 4, 1) == V{0, 2, 4, 6, 1, 3, 5, 7});
  CHECK(get_recat(2, 4, 2) == V{0, 4, 2, 6, 1, 5, 3, 7});
  CHECK(get_recat(2, 2) == V{0, 2, 1, 3});
  CHECK(get_recat(1, 2) == V{0, 1});
  CHECK_FALSE(get_recat(0, 4, 2).has_value());
  CHECK_THROWS_WITH(get_recat(2, 4, 3), Contains("stagger 3 must be >= 1 and divide num_splits 4"));
}

TEST_CASE("KJT dist: the KJTAllToAll docs example", "[kjt_dist]") {
  const KeyedJaggedTensor r0 = docs_example_rank0(), r1 = docs_example_rank1();
  CHECK(kjt_dist_labels(r0) == std::vector<std::string>{"lengths", "values"});
  // phase 1 rows: r0 sends [6, 5, 3] to rank 0 and [3, 2, 3] to rank 1 (stride appended by the op)
  CHECK(kjt_dist_splits(r0, {2, 1}) == std::vector<V>{{6, 3}, {5, 2}});
  CHECK(kjt_dist_splits(r1, {2, 1}) == std::vector<V>{{6, 3}, {5, 2}});
  // phase 2 raw buffers on rank 0
  std::vector<Tensor> got = received({r0, r1}, {2, 1}, 0);
  CHECK(iv(got[0]) == V{1, 0, 2, 0, 1, 1, 1, 1, 0, 0, 1, 2});
  CHECK(iv(got[1]) == V{100, 101, 102, 200, 201, 103, 104, 202, 203, 204});

  std::vector<KeyedJaggedTensor> out = simulate_a2a({r0, r1}, {2, 1});
  CHECK(out[0].keys() == std::vector<std::string>{"A", "B"});
  CHECK(out[0].stride() == 6);
  CHECK(iv(out[0]["A"].lengths()) == V{1, 0, 2, 1, 1, 0});
  CHECK(iv(out[0]["B"].lengths()) == V{0, 1, 1, 0, 1, 2});
  CHECK(iv(out[0].values()) == V{100, 101, 102, 103, 104, 200, 201, 202, 203, 204});
  CHECK(out[1].keys() == std::vector<std::string>{"C"});
  CHECK(out[1].stride() == 6);
  CHECK(iv(out[1].lengths()) == V{1, 1, 0, 1, 1, 0});
  CHECK(iv(out[1].values()) == V{300, 301, 302, 303});
}

TEST_CASE("KJT dist: weights move with values", "[kjt_dist]") {
  const KeyedJaggedTensor r0 = docs_example_rank0(true), r1 = docs_example_rank1(true);
  CHECK(kjt_dist_labels(r0) == std::vector<std::string>{"lengths", "values", "weights"});
  CHECK(kjt_dist_splits(r0, {2, 1}) == std::vector<V>{{6, 3}, {5, 2}, {5, 2}});
  for (const KeyedJaggedTensor& out : simulate_a2a({r0, r1}, {2, 1})) {
    REQUIRE(out.has_weights());
    CHECK(out.weights().dtype() == DType::Float64);
    const std::vector<int64_t> ids = iv(out.values());
    const std::vector<double> w = dv(out.weights());
    REQUIRE(w.size() == ids.size());
    for (size_t i = 0; i < ids.size(); ++i) CHECK(w[i] == ids[i] / 1000.0);
  }
}

TEST_CASE("KJT dist: unequal batch sizes per rank", "[kjt_dist]") {
  // rank 0 has 2 samples, rank 1 has 3; keys x (to rank 0), y (to rank 1)
  KeyedJaggedTensor r0 = KeyedJaggedTensor::from_lengths_sync({"x", "y"}, i64({1, 2, 3}), i64({1, 0, 2, 0}));
  KeyedJaggedTensor r1 = KeyedJaggedTensor::from_lengths_sync({"x", "y"}, i64({4, 5, 6, 7}),
                                                              i64({0, 1, 1, 1, 0, 1}));
  std::vector<KeyedJaggedTensor> out = simulate_a2a({r0, r1}, {1, 1});
  CHECK(out[0].stride() == 5);
  CHECK(iv(out[0].lengths()) == V{1, 0, 0, 1, 1});
  CHECK(iv(out[0].values()) == V{1, 4, 5});
  CHECK(out[1].stride() == 5);
  CHECK(iv(out[1].lengths()) == V{2, 0, 1, 0, 1});
  CHECK(iv(out[1].values()) == V{2, 3, 6, 7});
}

TEST_CASE("KJT dist: variable stride per key", "[kjt_dist][vbe]") {
  // rank 0: x 1 sample [1], y 2 samples [2], [3]; rank 1: x 2 samples [4], [], y 1 sample [5, 6]
  KeyedJaggedTensor r0 = KeyedJaggedTensor::from_lengths_sync(
      {"x", "y"}, i64({1, 2, 3}), i64({1, 1, 1}), {}, std::nullopt, std::vector<V>{{1}, {2}});
  KeyedJaggedTensor r1 = KeyedJaggedTensor::from_lengths_sync(
      {"x", "y"}, i64({4, 5, 6}), i64({1, 0, 2}), {}, std::nullopt, std::vector<V>{{2}, {1}});
  CHECK(kjt_dist_labels(r0) == std::vector<std::string>{"lengths", "values", "strides"});
  CHECK(kjt_dist_splits(r0, {2, 0}) == std::vector<V>{{3, 0}, {3, 0}, {2, 0}});
  CHECK(iv(kjt_dist_tensors(r1)[2]) == V{2, 1});
  std::vector<KeyedJaggedTensor> out = simulate_a2a({r0, r1}, {2, 0});
  CHECK(out[0].variable_stride_per_key());
  CHECK(out[0].stride_per_key_per_rank() == std::vector<V>{{1, 2}, {2, 1}});
  CHECK(iv(out[0]["x"].lengths()) == V{1, 1, 0});
  CHECK(iv(out[0]["x"].values()) == V{1, 4});
  CHECK(iv(out[0]["y"].lengths()) == V{1, 1, 2});
  CHECK(iv(out[0]["y"].values()) == V{2, 3, 5, 6});
  CHECK(out[1].num_keys() == 0);
}

TEST_CASE("KJT dist: stagger gives node-major source order", "[kjt_dist]") {
  // W = 4, one key per rank, rank s has stride 1 and the single id 10*s + destination
  std::vector<KeyedJaggedTensor> in;
  for (int64_t s = 0; s < 4; ++s)
    in.push_back(KeyedJaggedTensor::from_lengths_sync(
        {"k0", "k1", "k2", "k3"}, i64({10 * s, 10 * s + 1, 10 * s + 2, 10 * s + 3}), i64({1, 1, 1, 1})));
  std::vector<KeyedJaggedTensor> out = simulate_a2a(in, {1, 1, 1, 1}, 2);
  CHECK(iv(out[0].values()) == V{0, 20, 10, 30});   // sources in order 0, 2, 1, 3
  CHECK(iv(out[3].values()) == V{3, 23, 13, 33});
  out = simulate_a2a(in, {1, 1, 1, 1}, 1);
  CHECK(iv(out[1].values()) == V{1, 11, 21, 31});
}

TEST_CASE("KJT dist: random KJTs keep every key's bags, in source order", "[kjt_dist][property]") {
  std::mt19937_64 rng(17);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t W = 1 + static_cast<int64_t>(rng() % 4);
    const int64_t K = static_cast<int64_t>(rng() % 6);
    const bool weighted = rng() % 2 == 0;
    std::vector<int64_t> key_splits(static_cast<size_t>(W), 0);
    for (int64_t k = 0; k < K; ++k) ++key_splits[rng() % W];
    std::vector<std::string> keys;
    for (int64_t k = 0; k < K; ++k) {  // (not "f" + to_string: GCC 12's -Wrestrict false positive at -O3)
      keys.emplace_back("f");
      keys.back() += std::to_string(k);
    }
    std::vector<KeyedJaggedTensor> in;
    int64_t total = 0;
    for (int64_t s = 0; s < W; ++s) {
      const int64_t B = static_cast<int64_t>(rng() % 4);
      V lengths, values;
      std::vector<float> w;
      for (int64_t i = 0; i < K * B; ++i) {
        lengths.push_back(static_cast<int64_t>(rng() % 4));
        for (int64_t j = 0; j < lengths.back(); ++j) {
          values.push_back(static_cast<int64_t>(rng() % 1000));
          w.push_back(static_cast<float>(values.back()) + 0.5f);
        }
      }
      total += static_cast<int64_t>(values.size());
      in.push_back(KeyedJaggedTensor::from_lengths_sync(keys, i64(values), i64(lengths),
                                                        weighted ? f32(w) : Tensor(), B));
    }
    std::vector<KeyedJaggedTensor> out = simulate_a2a(in, key_splits);
    int64_t got = 0;
    for (int64_t r = 0; r < W; ++r) {
      got += out[r].values().numel();
      for (const std::string& key : out[r].keys()) {
        V want_lengths, want_values;
        for (int64_t s = 0; s < W; ++s) {
          JaggedTensor jt = in[s][key];
          for (int64_t v : iv(jt.lengths())) want_lengths.push_back(v);
          for (int64_t v : iv(jt.values())) want_values.push_back(v);
        }
        CHECK(iv(out[r][key].lengths()) == want_lengths);
        CHECK(iv(out[r][key].values()) == want_values);
        if (weighted)
          for (size_t i = 0; i < want_values.size(); ++i)
            CHECK(out[r][key].weights().get_flat(i) == want_values[i] + 0.5);
      }
    }
    CHECK(got == total);
  }
}

TEST_CASE("KJT dist: errors", "[kjt_dist][validation]") {
  const KeyedJaggedTensor r0 = docs_example_rank0();
  CHECK_THROWS_WITH(kjt_dist_splits(r0, {2, 2}), Contains("kjt_dist_splits: key splits [2, 2] sum to 4 "
                                                          "but the KJT has 3 keys"));
  CHECK_THROWS_WITH(kjt_dist_splits(r0, {4, -1}), Contains("negative count"));
  const Tensor l = i64({1, 0, 1, 1}), v = i64({1, 2, 3});
  CHECK_THROWS_WITH(kjt_dist_init({"A"}, {l}, false, 2, V{0, 1}, {2, 2}),
                    Contains("expected 2 tensors (lengths, values) and optionally weights, got 1"));
  CHECK_THROWS_WITH(kjt_dist_init({"A"}, {l, v}, false, 2, V{1, 1}, {2, 2}),
                    Contains("recat [1, 1] is not a permutation of 0..1"));
  CHECK_THROWS_WITH(kjt_dist_init({"A"}, {l, v}, false, 2, V{0, 1}, {2}),
                    Contains("stride_per_rank [2] has 1 entries for 2 workers"));
  CHECK_THROWS_WITH(kjt_dist_init({"A"}, {l, v}, false, 2, std::nullopt, {2, 2}),
                    Contains("a recat is needed"));
  CHECK_THROWS_WITH(kjt_dist_init({"A"}, {l, v}, false, 2, V{0, 1}, {2, 3}),
                    Contains("segment sizes [2, 3] need more than the 4 length entries"));
  CHECK_THROWS_WITH(kjt_dist_init({"A"}, {l, i64({1, 2})}, false, 2, V{0, 1}, {2, 2}),
                    Contains("lengths sum to 3 but values has 2 rows"));
  CHECK_THROWS_WITH(kjt_dist_init({"A", "B"}, {i64({1, 1}), i64({1, 2}), i64({1, 1})}, true, 1,
                                  V{1, 0}, {}),
                    Contains("does not put the 1 segments of local key 0 at positions 0..0"));
  // W = 1: the identity recat, or none
  KeyedJaggedTensor one = kjt_dist_init({"A", "B", "C"}, kjt_dist_tensors(r0), false, 1, std::nullopt, {3});
  CHECK(iv(one.lengths()) == iv(r0.lengths()));
  CHECK(iv(one.values()) == iv(r0.values()));
}
