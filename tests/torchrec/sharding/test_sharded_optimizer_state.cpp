// The fused optimizers' state of a sharded EBC: saved whole with optimizer_state_dict() after two
// steps of a mixed plan on W = 4, loaded with the tables into
//   - the same plan: the next step is bit-identical to the uninterrupted one;
//   - another plan on W = 2 (same global batch): the next step equals it within 1e-12 (float64);
// for ADAM, EXACT_ADAGRAD and EXACT_ROWWISE_ADAGRAD; and row-wise state refused, naming the
// table and the column blocks, by a plan that splits a table's columns differently.
#include <ferry/autograd/ops.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/comm_test_helpers.h"
#include "tests/torchrec/sharded_test_util.h"
#include "tests/differentiable/spmd_gradcheck.h"

#include <cmath>
#include <random>
#include <sstream>

using namespace ferry;
using namespace ferry::torchrec;
using dgtest::expect;

namespace {

constexpr int64_t kB = 2;  // samples per rank of the W = 4 world

// (name, rows, dim): every table one feature named after it.
const testing::TableList kTables{
    {"t0", 11, 4}, {"t1", 7, 3}, {"t2", 9, 6}, {"t3", 13, 2}, {"t4", 6, 3}, {"t5", 10, 4}};

std::vector<EmbeddingBagConfig> configs() { return testing::bag_configs_of(kTables, DType::Float64); }
std::vector<TableShape> shapes() { return testing::shapes_of(kTables); }

// The batch of W4-rank `r` at `step`: per feature, kB bags of 0..3 ids.
void append_batch(int r, int step, std::vector<std::vector<int64_t>>& lengths,
                  std::vector<std::vector<int64_t>>& ids) {
  std::mt19937_64 rng(977ULL * static_cast<uint64_t>(step) + 31ULL * static_cast<uint64_t>(r));
  for (size_t t = 0; t < kTables.size(); ++t)
    for (int64_t s = 0; s < kB; ++s) {
      const int64_t n = static_cast<int64_t>(rng() % 4);
      lengths[t].push_back(n);
      for (int64_t j = 0; j < n; ++j)
        ids[t].push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(std::get<1>(kTables[t]))));
    }
}

// The KJT of the W4 ranks' batches `ranks` concatenated (rank-major within each feature).
KeyedJaggedTensor kjt_of(const std::vector<int>& ranks, int step) {
  std::vector<std::vector<int64_t>> lengths(kTables.size()), ids(kTables.size());
  for (int r : ranks) append_batch(r, step, lengths, ids);
  std::vector<int64_t> all_lengths, all_ids;
  std::vector<std::string> keys;
  for (size_t t = 0; t < kTables.size(); ++t) {
    keys.push_back("f" + std::get<0>(kTables[t]));
    all_lengths.insert(all_lengths.end(), lengths[t].begin(), lengths[t].end());
    all_ids.insert(all_ids.end(), ids[t].begin(), ids[t].end());
  }
  return KeyedJaggedTensor::from_lengths_sync(keys, from_vector(all_ids), from_vector(all_lengths));
}

// One training step of `s` on the W4 ranks `ranks` (this rank's part of the global batch):
// loss = sum(y * (0.5 y + sin(...))) / samples, backward (fused updates), data_parallel step.
void train_step(ShardedEmbeddingBagCollection& s, const std::vector<int>& ranks, int step) {
  PooledEmbeddings y = s.forward(kjt_of(ranks, step));
  const Tensor& v = y.values.value();
  std::vector<double> target;  // a function of the global element index
  const int64_t first = ranks.front() * kB * v.size(1);
  for (int64_t i = 0; i < v.numel(); ++i)
    target.push_back(std::sin(0.3 * static_cast<double>(first + i) + step));
  Variable G(from_vector<double>(target, v.shape()));
  const double n = static_cast<double>(v.size(0));
  div(sum(mul(y.values, add(mul(y.values, 0.5), G))), n).backward();
  s.step_data_parallel();
}


void expect_states(const std::map<std::string, Tensor>& got,
                   const std::map<std::string, Tensor>& want, double tol, const Group& g,
                   const std::string& what) {
  expect(got.size() == want.size(), g, what + ": different keys");
  for (const auto& [key, t] : want) {
    auto it = got.find(key);
    expect(it != got.end() && it->second.shape() == t.shape(), g, what + ": " + key + " missing");
    const double e = testing::max_rel_err(it->second, t);
    std::ostringstream os;
    os << what << ": " << key << " relative error " << e << " > " << tol;
    expect(e <= tol, g, os.str());
  }
}

// W = 4, local size 2: t0 table_wise, t1 row_wise, t2 column_wise (2 blocks), t3
// table_row_wise, t4 data_parallel, t5 table_column_wise (2 blocks).
ModuleShardingPlan plan4() {
  return construct_module_sharding_plan(shapes(),
                                        {{"t0", table_wise(3)}, {"t1", row_wise()},
                                         {"t2", column_wise({0, 2})}, {"t3", table_row_wise(1)},
                                         {"t4", data_parallel()}, {"t5", table_column_wise(0)}},
                                        4, 2);
}

// W = 2: the same column blocks for t2 and t5 (two each), other types elsewhere; or, with
// `merge_columns`, t2 whole on one rank.
ModuleShardingPlan plan2(bool merge_columns) {
  return construct_module_sharding_plan(
      shapes(),
      {{"t0", row_wise()}, {"t1", table_wise(1)},
       {"t2", merge_columns ? table_wise(0) : column_wise({1, 0})}, {"t3", table_wise(0)},
       {"t4", row_wise()}, {"t5", column_wise({0, 1})}},
      2, 2);
}

FusedOptimizerConfig config_of(EmbOptimType type) {
  FusedOptimizerConfig c;
  c.optimizer = type;
  c.learning_rate = type == EmbOptimType::Adam ? 0.02 : 0.05;
  c.initial_accumulator_value = 0.01;
  return c;
}

}  // namespace

DG_CASE("sharded EBC optimizer state: saved whole, resumed on the same plan bit for bit and on "
        "another plan and world size within 1e-12; row-wise state across column splits refused",
        "[torchrec][sharded][state]", 4) {
  const int me = g.rank();
  for (EmbOptimType type :
       {EmbOptimType::Adam, EmbOptimType::ExactAdagrad, EmbOptimType::ExactRowwiseAdagrad}) {
    const std::string what = emb_optim_type_name(type);
    ShardedEmbeddingBagCollection run(configs(), false, plan4(), g, {.local_size = 2},
                                      config_of(type), 7);
    train_step(run, {me}, 0);
    train_step(run, {me}, 1);
    const auto tables = run.state_dict();
    const auto opt = run.optimizer_state_dict();
    expect(opt.count("embedding_bags.t1.weight.step") == 1 &&
               opt.at("embedding_bags.t1.weight.step").get_flat(0) == 2.0,
           g, what + ": the step count of t1 is not 2");
    expect(opt.count("embedding_bags.t4.weight.momentum1") == 1, g,
           what + ": the data_parallel table's state is missing");
    train_step(run, {me}, 2);
    const auto want = run.state_dict();
    const auto want_opt = run.optimizer_state_dict();

    // The same plan, fresh tables (another seed): bit-identical.
    ShardedEmbeddingBagCollection same(configs(), false, plan4(), g, {.local_size = 2},
                                       config_of(type), 99);
    same.load_state_dict(tables);
    same.load_optimizer_state_dict(opt);
    train_step(same, {me}, 2);
    expect_states(same.state_dict(), want, 0.0, g, what + ", same plan");
    expect_states(same.optimizer_state_dict(), want_opt, 0.0, g, what + ", same plan, state");

    // W = 2 (ranks 0,1 and 2,3 each a world), each rank taking two W4 ranks' samples.
    Group sub = g.split(me < 2 ? 0 : 1, me);
    const std::vector<int> mine{2 * sub.rank(), 2 * sub.rank() + 1};
    ShardedEmbeddingBagCollection two(configs(), false, plan2(false), sub, {.local_size = 2},
                                      config_of(type), 5);
    two.load_state_dict(tables);
    two.load_optimizer_state_dict(opt);
    train_step(two, mine, 2);
    expect_states(two.state_dict(), want, 1e-12, g, what + ", W = 2");
    expect_states(two.optimizer_state_dict(), want_opt, 1e-12, g, what + ", W = 2, state");

    // A table of the right size, transposed: refused, naming the shape wanted and the one given.
    auto transposed = tables;
    Tensor& t1 = transposed.at("embedding_bags.t1.weight");
    const Shape s1 = t1.shape();
    t1 = t1.reshape({s1[1], s1[0]});
    trtest::expect_invalid([&] { two.load_state_dict(transposed); },
                           {"\"embedding_bags.t1.weight\" must be " + shape_str(s1) + ", given " +
                            shape_str({s1[1], s1[0]})},
                           sub, what + ": a transposed table");

    if (type == EmbOptimType::ExactRowwiseAdagrad) {
      ShardedEmbeddingBagCollection merged(configs(), false, plan2(true), sub, {.local_size = 2},
                                           config_of(type), 5);
      if (sub.rank() == 0) {  // t2 lives on rank 0 of the W = 2 plan
        trtest::expect_invalid([&] { merged.load_optimizer_state_dict(opt); },
                               {"table \"t2\"", "column blocks starting at [0, 3]", "[0, 6)"},
                               sub, what + " into merged columns");
      }
    }
  }
}
