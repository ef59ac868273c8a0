// The data_parallel tables' gradient average (sharding/data_parallel_tables.h) on both of its
// paths: a large table touched by few ids (the touched rows are all-gathered) and a tiny table
// whose rows every rank touches (the dense buffer is all-reduced), with one rank touching no
// row of the large table at all. After a fused-SGD step the tables equal the unsharded
// collection trained on the global batch with the mean loss, within 1e-12 (float64).
#include <ferry/autograd/ops.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/sharded_test_util.h"
#include "tests/differentiable/spmd_gradcheck.h"

#include <random>

using namespace ferry;
using namespace ferry::torchrec;
using dgtest::expect;

namespace {

constexpr int64_t kB = 3;  // samples per rank
const testing::TableList kTables{{"big", 2000, 4}, {"tiny", 2, 3}};

// Rank r's bags: "fbig" 0..2 ids per sample (none at all on rank 1), "ftiny" both rows.
void append(int r, std::vector<int64_t>& big_len, std::vector<int64_t>& big_ids,
            std::vector<int64_t>& tiny_len, std::vector<int64_t>& tiny_ids) {
  std::mt19937_64 rng(5 + static_cast<uint64_t>(r));
  for (int64_t s = 0; s < kB; ++s) {
    const int64_t n = r == 1 ? 0 : static_cast<int64_t>(rng() % 3);
    big_len.push_back(n);
    for (int64_t j = 0; j < n; ++j) big_ids.push_back(static_cast<int64_t>(rng() % 2000));
    tiny_len.push_back(2);
    tiny_ids.push_back(0);
    tiny_ids.push_back(1);
  }
}

KeyedJaggedTensor kjt_of(const std::vector<int>& ranks) {
  std::vector<int64_t> bl, bi, tl, ti;
  for (int r : ranks) append(r, bl, bi, tl, ti);
  std::vector<int64_t> lengths = bl, ids = bi;
  lengths.insert(lengths.end(), tl.begin(), tl.end());
  ids.insert(ids.end(), ti.begin(), ti.end());
  return KeyedJaggedTensor::from_lengths_sync({"fbig", "ftiny"}, from_vector(ids),
                                              from_vector(lengths));
}

Variable half_square_mean(const Variable& y, int64_t samples) {
  return div(mul(sum(mul(y, y)), 0.5), static_cast<double>(samples));
}

}  // namespace

DG_CASE("data_parallel tables: the sparse (all-gathered rows) and dense (all-reduced buffer) "
        "averages both equal the unsharded step on the global batch",
        "[torchrec][sharded][data_parallel]", 2, 3) {
  const int W = g.size(), me = g.rank();
  const auto configs = testing::bag_configs_of(kTables, DType::Float64);
  const FusedOptimizerConfig sgd{.learning_rate = 0.5};
  ShardedEmbeddingBagCollection s(
      configs, false,
      construct_module_sharding_plan(testing::shapes_of(kTables),
                                     {{"big", data_parallel()}, {"tiny", data_parallel()}}, W, W),
      g, {.local_size = W}, sgd, 21);
  PooledEmbeddings y = s.forward(kjt_of({me}));
  half_square_mean(y.values, kB).backward();
  s.step_data_parallel();
  const auto got = s.state_dict();

  EmbeddingBagCollection ref(configs, false, 21, sgd);
  std::vector<int> all;
  for (int r = 0; r < W; ++r) all.push_back(r);
  half_square_mean(ref.forward(kjt_of(all)).values, kB * W).backward();
  for (const auto& [key, want] : ref.state_dict()) {
    const double e = testing::max_rel_err(got.at(key), want);
    expect(e <= 1e-12, g, key + ": relative error " + std::to_string(e));
  }
  // The step moved both tables (the check is not vacuous).
  EmbeddingBagCollection untrained(configs, false, 21);
  for (const auto& [key, t] : untrained.state_dict())
    expect(testing::max_rel_err(got.at(key), t) > 0, g, key + " did not change");
}
