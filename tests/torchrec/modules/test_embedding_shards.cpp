// The lookups on table shards (what the sharded modules run locally): row blocks give partial
// sums that add up to the full lookup (SUM, weighted, MEAN with the full bag lengths as
// divisors), column blocks concatenate to it, and each shard's sparse gradient is the full
// gradient's block.
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/jagged_test_util.h"

#include <catch2/catch.hpp>

#include <random>

using namespace ferry;
using namespace ferry::torchrec;
using namespace ferry::torchrec::testing;
using Catch::Matchers::Contains;

namespace {

constexpr int64_t kRows = 10, kCols = 4, kBatch = 5;

// Two keys, random bag lengths 0..4 and ids in [0, kRows), weights in [-1, 1).
KeyedJaggedTensor random_kjt(uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<int64_t> values, lengths;
  std::vector<double> weights;
  for (int k = 0; k < 2; ++k) {
    for (int64_t b = 0; b < kBatch; ++b) {
      const int64_t n = static_cast<int64_t>(gen() % 5);
      lengths.push_back(n);
      for (int64_t i = 0; i < n; ++i) {
        values.push_back(static_cast<int64_t>(gen() % kRows));
        weights.push_back(static_cast<double>(gen() % 2000) / 1000.0 - 1.0);
      }
    }
  }
  return KeyedJaggedTensor::from_lengths_sync({"a", "b"}, from_vector(values),
                                              from_vector(lengths), from_vector(weights));
}

std::vector<FeatureLookup> lookups_of(const std::shared_ptr<EmbeddingTable>& t, PoolingType p) {
  return {{.table = t, .feature = "a", .pooling = p}, {.table = t, .feature = "b", .pooling = p}};
}

std::shared_ptr<EmbeddingTable> shard_of(const Tensor& full, TableShard s) {
  Tensor w = full.narrow_copy(0, s.row_offset, s.num_rows).narrow_copy(1, s.col_offset, s.num_cols);
  return std::make_shared<EmbeddingTable>("t", w, kRows, kCols, s);
}

// Row blocks of ceil(R / W) rows (the last may be short or empty), as row_wise sharding.
std::vector<TableShard> row_blocks(int64_t world) {
  std::vector<TableShard> out;
  const int64_t block = (kRows + world - 1) / world;
  for (int64_t j = 0; j < world; ++j) {
    const int64_t lo = std::min(kRows, j * block), hi = std::min(kRows, lo + block);
    out.push_back({lo, hi - lo, 0, kCols});
  }
  return out;
}

}  // namespace

TEST_CASE("shard lookups: row blocks sum to the full lookup, gradients are its blocks",
          "[embedding_shards]") {
  const Tensor full_w = uniform({kRows, kCols}, -1, 1, 17, DType::Float64);
  for (uint64_t seed : {1u, 2u, 3u}) {
    const auto kjt = random_kjt(seed);
    for (bool weighted : {false, true}) {
      for (PoolingType pooling : {PoolingType::Sum, PoolingType::Mean}) {
        for (int64_t world : {1, 2, 3, 4}) {
          CAPTURE(seed, weighted, pooling_type_name(pooling), world);
          auto full = std::make_shared<EmbeddingTable>("t", full_w.clone());
          Variable w = weighted ? Variable(kjt.weights()) : Variable();
          Variable ref = pooled_embedding_lookup(lookups_of(full, pooling), kjt, w);
          Tensor up = uniform(ref.shape(), -1, 1, 5, DType::Float64);
          backward(ref, up);

          Tensor sum = zeros(ref.shape(), DType::Float64);
          for (const TableShard& s : row_blocks(world)) {
            auto shard = shard_of(full_w, s);
            // MEAN under row-wise divides by the FULL bag length: pass it as the divisors.
            Variable part = pooled_embedding_lookup(
                lookups_of(shard, pooling), kjt, w,
                pooling == PoolingType::Mean ? kjt.lengths() : Tensor());
            sum.vec<double>() += part.value().vec<double>();
            backward(part, up);
            // The shard's gradient is the full gradient's rows of the block (same order of
            // accumulation per row, so exactly).
            const SparseRowGradient& g = shard->sparse_grad();
            const SparseRowGradient& gf = full->sparse_grad();
            std::vector<int64_t> expected_rows;
            std::vector<double> expected_values;
            for (int64_t i = 0; i < gf.num_rows(); ++i) {
              const int64_t r = gf.rows().data<int64_t>()[i];
              if (r < s.row_offset || r >= s.row_offset + s.num_rows) continue;
              expected_rows.push_back(r - s.row_offset);
              for (int64_t c = 0; c < kCols; ++c)
                expected_values.push_back(gf.values().get_flat(i * kCols + c));
            }
            CHECK(iv(g.rows()) == expected_rows);
            CHECK(dv(g.values()) == expected_values);
          }
          CHECK(allclose(sum, ref.value(), 1e-12, 1e-14));
          if (world == 1) CHECK(equal(sum, ref.value()));
        }
      }
    }
  }
}

TEST_CASE("shard lookups: column blocks concatenate to the full lookup exactly",
          "[embedding_shards]") {
  const Tensor full_w = uniform({kRows, kCols}, -1, 1, 23, DType::Float64);
  const auto kjt = random_kjt(9);
  for (PoolingType pooling : {PoolingType::Sum, PoolingType::Mean}) {
    CAPTURE(pooling_type_name(pooling));
    auto full = std::make_shared<EmbeddingTable>("t", full_w.clone());
    Variable ref = pooled_embedding_lookup(
        {{.table = full, .feature = "a", .pooling = pooling}}, kjt, Variable(kjt.weights()));
    std::vector<Tensor> parts;
    for (TableShard s : {TableShard{0, kRows, 0, 1}, TableShard{0, kRows, 1, 3}}) {
      auto shard = shard_of(full_w, s);
      parts.push_back(pooled_embedding_lookup({{.table = shard, .feature = "a",
                                                .pooling = pooling}},
                                              kjt, Variable(kjt.weights()))
                          .value());
    }
    CHECK(equal(cat(parts, 1), ref.value()));
  }
  // Per-id lookups: row blocks give zeros outside the block, so they sum to the full rows;
  // column blocks concatenate.
  auto full = std::make_shared<EmbeddingTable>("t", full_w.clone());
  Tensor ref = sequence_embedding_lookup({{.table = full, .feature = "b"}}, kjt)[0].value();
  Tensor sum = zeros(ref.shape(), DType::Float64);
  for (const TableShard& s : row_blocks(3)) {
    sum.vec<double>() +=
        sequence_embedding_lookup({{.table = shard_of(full_w, s), .feature = "b"}}, kjt)[0]
            .value()
            .vec<double>();
  }
  CHECK(equal(sum, ref));
  Tensor left = sequence_embedding_lookup(
      {{.table = shard_of(full_w, {0, kRows, 0, 2}), .feature = "b"}}, kjt)[0].value();
  Tensor right = sequence_embedding_lookup(
      {{.table = shard_of(full_w, {0, kRows, 2, 2}), .feature = "b"}}, kjt)[0].value();
  CHECK(equal(cat({left, right}, 1), ref));
}

TEST_CASE("shard lookups: keys by index, global id checks, bad shards and divisors",
          "[embedding_shards]") {
  const Tensor full_w = uniform({kRows, kCols}, -1, 1, 29, DType::Float64);
  // A bucketized-style KJT repeating key "a" (duplicates allowed): look keys up by index.
  auto dup = KeyedJaggedTensor(KjtInit{.keys = {"a", "a"},
                                       .values = from_vector<int64_t>({1, 2, 3}),
                                       .lengths = from_vector<int64_t>({1, 0, 1, 1}),
                                       .allow_duplicate_keys = true});
  auto t = std::make_shared<EmbeddingTable>("t", full_w.clone());
  Tensor v = pooled_embedding_lookup({{.table = t, .feature = "a", .key_index = 1}}, dup)
                 .value();
  Tensor e2 = full_w.narrow(0, 2, 1), e3 = full_w.narrow(0, 3, 1);
  CHECK(dv(v.narrow(0, 0, 1)) == dv(e2));
  CHECK(dv(v.narrow(0, 1, 1)) == dv(e3));

  // Ids are global: a row block of rows [4, 8) still rejects id 10 of a 10-row table.
  auto block = shard_of(full_w, {4, 4, 0, kCols});
  auto bad = KeyedJaggedTensor::from_lengths_sync({"a"}, from_vector<int64_t>({10}),
                                                  from_vector<int64_t>({1}));
  CHECK_THROWS_WITH(pooled_embedding_lookup({{.table = block, .feature = "a"}}, bad),
                    Contains("id 10 of feature \"a\" (sample 0) is out of range for table "
                             "\"t\" of 10 rows"));
  CHECK_THROWS_WITH(
      EmbeddingTable("s", zeros({4, 4}, DType::Float64), kRows, kCols, {8, 4, 0, kCols}),
      Contains("shard rows [8, 12) x cols [0, 4) is not inside the 10 x 4 table"));
  CHECK_THROWS_WITH(pooled_embedding_lookup({{.table = t, .feature = "a",
                                              .pooling = PoolingType::Mean}},
                                            KeyedJaggedTensor::from_lengths_sync(
                                                {"a"}, from_vector<int64_t>({3}),
                                                from_vector<int64_t>({1})),
                                            Variable(), from_vector<int64_t>({1, 2})),
                    Contains("mean_divisors must be 1-D int32/int64 with 1 entries"));
}
