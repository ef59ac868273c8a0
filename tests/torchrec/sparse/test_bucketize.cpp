// bucketize_kjt_before_all2all (a hand-computed case and more) and the pooled-embedding column permutation.
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/jagged_test_util.h"

#include <catch2/catch.hpp>

#include <random>

using namespace ferry;
using namespace ferry::torchrec;
using namespace ferry::torchrec::testing;
using Catch::Matchers::Contains;

TEST_CASE("bucketize: a hand-computed two-bucket case, exactly", "[bucketize][worked]") {
  // W = 2, feature F of hash size 10 -> block 5; lengths [2, 1], values [7, 3, 5]
  const KeyedJaggedTensor in = KeyedJaggedTensor::from_lengths_sync({"F"}, i64({7, 3, 5}), i64({2, 1}));
  BucketizedKjt out = bucketize_kjt_before_all2all(in, 2, V{5}, true);
  CHECK(out.kjt.keys() == std::vector<std::string>{"F", "F"});
  CHECK(out.kjt.stride() == 2);
  CHECK(iv(out.kjt.lengths()) == V{1, 0, 1, 1});
  CHECK(iv(out.kjt.values()) == V{3, 2, 0});
  REQUIRE(out.unbucketize_permute);
  CHECK(iv(*out.unbucketize_permute) == V{1, 0, 2});
  // index-selecting the bucketized order with it restores [7, 3, 5]'s order
  const V bucketized_ids = iv(bucketize_kjt_before_all2all(in, 2, V{5}, false, false, std::nullopt, true).kjt.values());
  CHECK(bucketized_ids == V{3, 7, 5});
  V restored;
  for (int64_t p : iv(*out.unbucketize_permute)) restored.push_back(bucketized_ids[p]);
  CHECK(restored == V{7, 3, 5});
  // without output_permute there is none; the tensor overload agrees
  BucketizedKjt plain = bucketize_kjt_before_all2all(in, 2, i64({5}));
  CHECK_FALSE(plain.unbucketize_permute);
  CHECK(iv(plain.kjt.values()) == V{3, 2, 0});
}

TEST_CASE("bucketize: overflow ids, weights, bucketize_pos, int32 lengths, row_pos", "[bucketize]") {
  // block 3, 2 buckets: ids >= 6 go to id % 2 with id % 3 stored
  const KeyedJaggedTensor in = KeyedJaggedTensor::from_lengths_sync(
      {"a", "b"}, i64({0, 4, 7, 9, 2, 5}), i32({3, 1, 0, 2}), f32({0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f}));
  BucketizedKjt out = bucketize_kjt_before_all2all(in, 2, V{3, 3}, true);
  // a/b0: 0->b0 id0, 4->b1 id1, 7->b1 (7 % 2) id1; a/b1: 9->b1 (9 % 2) id0; b/b0: none; b/b1: 2->b0 id2, 5->b1 id2
  CHECK(iv(out.kjt.lengths()) == V{1, 0, 0, 1, 2, 1, 0, 1});
  CHECK(out.kjt.lengths().dtype() == DType::Int32);
  CHECK(iv(out.kjt.values()) == V{0, 2, 1, 1, 0, 2});
  CHECK(dv(out.kjt.weights()) == std::vector<double>{0.5, 4.5, 1.5, 2.5, 3.5, 5.5});
  CHECK(iv(*out.unbucketize_permute) == V{0, 2, 3, 4, 1, 5});
  BucketizedKjt pos = bucketize_kjt_before_all2all(in, 2, V{3, 3}, false, true);
  CHECK(pos.kjt.weights().dtype() == DType::Float32);
  CHECK(dv(pos.kjt.weights()) == std::vector<double>{0, 0, 1, 2, 0, 1});
  // uneven shards: a rows [0, 1) and [1, 10); b rows [0, 5) and [5, 6)
  BucketizedKjt rp = bucketize_kjt_before_all2all(in, 2, V{3, 3}, false, false, std::vector<V>{{0, 1, 10}, {0, 5, 6}});
  CHECK(iv(rp.kjt.lengths()) == V{1, 0, 0, 1, 2, 1, 0, 1});
  CHECK(iv(rp.kjt.values()) == V{0, 2, 3, 6, 8, 0});
}

TEST_CASE("bucketize: variable stride per key is kept", "[bucketize][vbe]") {
  const KeyedJaggedTensor in = KeyedJaggedTensor::from_lengths_sync(
      {"x", "y"}, i64({1, 5, 3}), i64({1, 1, 1}), {}, std::nullopt, std::vector<V>{{1}, {2}});
  BucketizedKjt out = bucketize_kjt_before_all2all(in, 2, V{4, 4});
  CHECK(out.kjt.stride_per_key_per_rank() == std::vector<V>{{1}, {2}, {1}, {2}});
  CHECK(iv(out.kjt.lengths()) == V{1, 0, 1, 0, 1, 0});
  CHECK(iv(out.kjt.values()) == V{1, 3, 1});
}

TEST_CASE("bucketize: random KJTs: the unbucketize permute is the identity's inverse, buckets hold their rows",
          "[bucketize][property]") {
  std::mt19937_64 rng(21);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t N = 1 + static_cast<int64_t>(rng() % 5), K = 1 + static_cast<int64_t>(rng() % 4),
                  B = static_cast<int64_t>(rng() % 5);
    std::vector<std::string> keys;
    V block, lengths, values, key_of;
    std::vector<double> w;
    for (int64_t k = 0; k < K; ++k) {
      keys.emplace_back("k");
      keys.back() += std::to_string(k);
      block.push_back(1 + static_cast<int64_t>(rng() % 20));
    }
    for (int64_t k = 0; k < K; ++k)
      for (int64_t b = 0; b < B; ++b) {
        lengths.push_back(static_cast<int64_t>(rng() % 6));
        for (int64_t j = 0; j < lengths.back(); ++j) {
          values.push_back(static_cast<int64_t>(rng() % (block[k] * N + 7)));  // some overflow ids
          key_of.push_back(k);
          w.push_back(static_cast<double>(values.size()));
        }
      }
    const KeyedJaggedTensor in = KeyedJaggedTensor::from_lengths_sync(keys, i64(values), i64(lengths), from_vector(w));
    BucketizedKjt out = bucketize_kjt_before_all2all(in, N, block, true, false, std::nullopt, true);
    const V perm = iv(*out.unbucketize_permute);
    const V ids = iv(out.kjt.values());
    const std::vector<double> ow = dv(out.kjt.weights());
    REQUIRE(perm.size() == values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      CHECK(ids[perm[i]] == values[i]);  // unbucketize(bucketize(x)) == x
      CHECK(ow[perm[i]] == w[i]);        // weights follow
    }
    // bucket p, key t holds the ids of its rows; bags keep their relative order
    const V ol = iv(out.kjt.lengths());
    int64_t pos = 0;
    for (int64_t p = 0; p < N; ++p)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t b = 0; b < B; ++b)
          for (int64_t j = 0; j < ol[(p * K + k) * B + b]; ++j, ++pos) {
            const int64_t id = ids[pos];
            CHECK((id < block[k] * N ? id / block[k] : id % N) == p);
            if (j > 0) CHECK(ow[pos - 1] < ow[pos]);
          }
    CHECK(pos == static_cast<int64_t>(values.size()));
    // the stored ids without keep_original_indices
    const V local = iv(bucketize_kjt_before_all2all(in, N, block).kjt.values());
    for (size_t i = 0; i < local.size(); ++i) CHECK(local[perm[i]] == values[i] % block[key_of[i]]);
  }
}

TEST_CASE("bucketize: errors", "[bucketize][validation]") {
  const KeyedJaggedTensor in = KeyedJaggedTensor::from_lengths_sync({"F"}, i64({7, 3, 5}), i64({2, 1}));
  CHECK_THROWS_WITH(bucketize_kjt_before_all2all(in, 0, V{5}), Contains("num_buckets 0 must be >= 1"));
  CHECK_THROWS_WITH(bucketize_kjt_before_all2all(in, 2, V{5, 5}), Contains("has 2 entries for 1 keys"));
  CHECK_THROWS_WITH(bucketize_kjt_before_all2all(in, 2, V{0}), Contains("must be positive"));
  const KeyedJaggedTensor neg = KeyedJaggedTensor::from_lengths_sync({"F"}, i64({-1}), i64({1}));
  CHECK_THROWS_WITH(bucketize_kjt_before_all2all(neg, 2, V{5}), Contains("negative id -1"));
  CHECK_THROWS_WITH(bucketize_kjt_before_all2all(in, 2, V{5}, false, false, std::vector<V>{{0, 3, 6}}),
                    Contains("id 7 outside its 6 rows"));
  CHECK_THROWS_WITH(bucketize_kjt_before_all2all(in, 2, V{5}, false, false, std::vector<V>{{0, 6}}),
                    Contains("must be 3 non-decreasing row offsets from 0"));
}

TEST_CASE("permute_pooled_embs / PermutePooledEmbeddingsSplit", "[bucketize][permute]") {
  // blocks of widths [1, 2, 1]: columns a | b b | c
  const Tensor e = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
  CHECK(dv(permute_pooled_embs(e, {1, 2, 1}, {2, 0, 1})) == std::vector<double>{4, 1, 2, 3, 8, 5, 6, 7});
  PermutePooledEmbeddingsSplit p({1, 2, 1}, {1, 2, 0});
  const Tensor y = p(e);
  CHECK(dv(y) == std::vector<double>{2, 3, 4, 1, 6, 7, 8, 5});
  CHECK(dv(p.inverse(y)) == dv(e));
  CHECK_THROWS_WITH(permute_pooled_embs(e, {1, 2, 1}, {0, 0, 1}), Contains("is not a permutation"));
  CHECK_THROWS_WITH(permute_pooled_embs(e, {1, 2}, {0, 1}), Contains("dims [1, 2] sum to 3"));
}

TEST_CASE("permute_pooled_embs: equal blocks of 8, 16, 32 and 64 floats and of 3 doubles",
          "[bucketize][permute]") {
  // Equal widths take copies of a fixed length; the result must still be each block moved whole.
  for (const auto& [width, dtype] : std::vector<std::pair<int64_t, DType>>{
           {8, DType::Float32}, {16, DType::Float32}, {32, DType::Float32},
           {64, DType::Float32}, {3, DType::Float64}}) {
    const int64_t rows = 5, blocks = 4;
    const std::vector<int64_t> dims(blocks, width), order{2, 0, 3, 1};
    Tensor e = empty({rows, blocks * width}, dtype);
    for (int64_t i = 0; i < e.numel(); ++i) e.set_flat(i, static_cast<double>(i));
    const Tensor out = permute_pooled_embs(e, dims, order);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < blocks; ++b) {
        for (int64_t c = 0; c < width; ++c) {
          const int64_t from = r * blocks * width + order[static_cast<size_t>(b)] * width + c;
          REQUIRE(out.get_flat(r * blocks * width + b * width + c) == static_cast<double>(from));
        }
      }
    }
  }
}
