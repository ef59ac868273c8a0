// DistributedModelParallel sharding a model itself: a ShardableModel with two embedding bag
// collections and a dense weight, sharded by the planner's plan (the same plan the planner gives on
// one rank) or by the caller's; one training step through the wrapper equals, bit for bit, the same
// model sharded by hand and wrapped from its sharded modules; a plan that lacks a collection or
// names one the model does not have, and two collections at one module path, are refused on every
// rank. A model with an embedding bag collection AND an embedding collection (sequence embeddings):
// one plan covers both, the sequence table never table_row_wise, two steps through the wrapper
// equal the model sharded by hand and equal the unsharded model trained on the global batch; a plan
// with table_row_wise for the sequence table is refused.
#include <ferry/autograd/ops.h>
#include <ferry/autograd/optimizer.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/comm_test_helpers.h"
#include "tests/torchrec/sharded_test_util.h"
#include "tests/differentiable/spmd_gradcheck.h"

#include <random>

using namespace ferry;
using namespace ferry::torchrec;
using dgtest::expect;

namespace {

EmbeddingBagConfig table(const std::string& name, int64_t rows, int64_t dim) {
  return {.name = name, .num_embeddings = rows, .embedding_dim = dim,
          .feature_names = {"f_" + name}, .pooling = PoolingType::Sum,
          .data_type = DType::Float64};
}

const std::vector<EmbeddingBagConfig>& sparse_tables() {
  static const std::vector<EmbeddingBagConfig> t{table("t0", 10, 4), table("t1", 6, 2)};
  return t;
}
const std::vector<EmbeddingBagConfig>& extra_tables() {
  static const std::vector<EmbeddingBagConfig> t{table("t2", 8, 3)};
  return t;
}

// Two collections and a dense weight [6, 1] on the first one's pooled output.
struct TwoCollections : ShardableModel {
  std::shared_ptr<ShardedEmbeddingBagCollection> sparse, extra;
  Variable w{from_vector<double>({0.5, -1, 0.25, 2, 1.5, -0.75}, {6, 1}), true, "w"};
  std::string second_path = "extra.ebc";

  std::vector<Variable> dense_parameters() override { return {w}; }
  std::vector<EmbeddingBagCollectionSlot> embedding_bag_collections() override {
    return {{.module_path = "sparse.ebc", .tables = sparse_tables(), .seed = 3,
             .install = [this](auto s) { sparse = std::move(s); }},
            {.module_path = second_path, .tables = extra_tables(), .seed = 4,
             .install = [this](auto s) { extra = std::move(s); }}};
  }
};

// This rank's features of `tables`: 3 samples, 0..2 ids each.
KeyedJaggedTensor features(const std::vector<EmbeddingBagConfig>& tables, int rank) {
  std::mt19937_64 rng(17 + static_cast<uint64_t>(rank));
  std::vector<std::string> keys;
  std::vector<int64_t> lengths, ids;
  for (const EmbeddingBagConfig& t : tables) {
    keys.push_back(t.feature_names[0]);
    for (int s = 0; s < 3; ++s) {
      const int64_t n = static_cast<int64_t>(rng() % 3);
      lengths.push_back(n);
      for (int64_t j = 0; j < n; ++j)
        ids.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(t.num_embeddings)));
    }
  }
  return KeyedJaggedTensor::from_lengths_sync(keys, from_vector(ids), from_vector(lengths));
}

void train_step(TwoCollections& m, DistributedModelParallel& dmp, int rank) {
  const Variable a = m.sparse->forward(features(sparse_tables(), rank)).values;
  const Variable b = m.extra->forward(features(extra_tables(), rank)).values;
  add(sum(matmul(a, m.w)), mul(sum(mul(b, b)), 0.5)).backward();
  dmp.step();
  dmp.zero_grad();
}

DistributedModelParallel::DenseOptimizerFactory sgd() {
  return [](std::vector<Variable> p) -> std::unique_ptr<Optimizer> {
    return std::make_unique<Sgd>(std::move(p), SgdOptions{.lr = 0.1});
  };
}

ModelShardingOptions options(int W) {
  ModelShardingOptions o;
  o.topology.batch_size = 3;
  o.topology.memory_budget = int64_t{1} << 20;
  o.pooling_factors = {{"t0", 1.0}, {"t1", 1.0}, {"t2", 1.0}};
  o.sharded.local_size = W;
  o.fused = FusedOptimizerConfig{.learning_rate = 0.2};
  return o;
}

}  // namespace

DG_CASE("DistributedModelParallel shards a ShardableModel by the planner's plan or the "
        "caller's; one step equals the model sharded by hand; bad plans refused on every rank",
        "[torchrec][dmp]", 1, 2, 3) {
  const int W = g.size(), me = g.rank();
  TwoCollections model;
  DistributedModelParallel dmp(model, g, sgd(), options(W));
  expect(model.sparse != nullptr && model.extra != nullptr, g, "a collection was not installed");

  // The planner's plan, as one rank computes it.
  std::map<std::string, std::vector<PlannerTable>> modules;
  for (const auto& [path, tables] : {std::pair{"sparse.ebc", sparse_tables()},
                                     std::pair{"extra.ebc", extra_tables()}})
    for (const EmbeddingBagConfig& c : tables) {
      PlannerTable t;
      t.name = c.name;
      t.rows = c.num_embeddings;
      t.dim = c.embedding_dim;
      modules[path].push_back(t);
    }
  Topology topo = options(W).topology;
  topo.world_size = W;
  topo.local_world_size = W;
  const ShardingPlan want = EmbeddingShardingPlanner(topo).plan(modules);
  expect(dmp.plan() == want, g, "the wrapper's plan is not the planner's:\n" +
                                    dmp.plan().to_string() + "vs\n" + want.to_string());
  expect(model.sparse->plan() == *want.get_plan_for_module("sparse.ebc"), g,
         "the installed collection has another plan");

  // By hand: the same plan, the same seeds, wrapped from its sharded modules.
  TwoCollections hand;
  auto sparse = std::make_shared<ShardedEmbeddingBagCollection>(
      sparse_tables(), false, *want.get_plan_for_module("sparse.ebc"), g, options(W).sharded,
      options(W).fused, 3);
  auto extra = std::make_shared<ShardedEmbeddingBagCollection>(
      extra_tables(), false, *want.get_plan_for_module("extra.ebc"), g, options(W).sharded,
      options(W).fused, 4);
  hand.sparse = sparse;
  hand.extra = extra;
  DistributedModelParallel by_hand(
      {hand.w},
      {std::make_shared<ShardedEbcModule>(sparse, "sparse.ebc"),
       std::make_shared<ShardedEbcModule>(extra, "extra.ebc")},
      g, sgd());
  train_step(model, dmp, me);
  train_step(hand, by_hand, me);
  expect(equal(model.w.value(), hand.w.value()), g, "the dense weight differs");
  for (auto [mine, theirs] : {std::pair{model.sparse, hand.sparse}, {model.extra, hand.extra}})
    for (const auto& [key, t] : theirs->state_dict())
      expect(equal(mine->state_dict().at(key), t), g, "the table " + key + " differs");

  // The caller's plan: taken as it is.
  ShardingPlan mine;
  std::vector<TableShape> s0, s1;
  for (const auto& c : sparse_tables()) s0.push_back({c.name, c.num_embeddings, c.embedding_dim});
  for (const auto& c : extra_tables()) s1.push_back({c.name, c.num_embeddings, c.embedding_dim});
  mine.set_plan_for_module("sparse.ebc", construct_module_sharding_plan(
                                             s0, {{"t0", row_wise()}, {"t1", data_parallel()}}, W,
                                             W, "sparse.ebc"));
  mine.set_plan_for_module("extra.ebc", construct_module_sharding_plan(
                                            s1, {{"t2", table_wise(W - 1)}}, W, W, "extra.ebc"));
  ModelShardingOptions given = options(W);
  given.plan = mine;
  TwoCollections planned;
  DistributedModelParallel with_plan(planned, g, sgd(), given);
  expect(with_plan.plan() == mine && planned.extra->plan() == *mine.get_plan_for_module("extra.ebc"),
         g, "the caller's plan was not used");

  // A plan without "extra.ebc" but with "other.ebc"; two collections at one path.
  ShardingPlan wrong;
  wrong.set_plan_for_module("sparse.ebc", *mine.get_plan_for_module("sparse.ebc"));
  wrong.set_plan_for_module("other.ebc", *mine.get_plan_for_module("extra.ebc"));
  given.plan = wrong;
  TwoCollections refused;
  trtest::expect_invalid([&] { DistributedModelParallel d(refused, g, sgd(), given); },
                         {"DistributedModelParallel on rank", "\"other.ebc\"", "\"extra.ebc\""}, g,
                         "a plan for other modules");
  TwoCollections twice;
  twice.second_path = "sparse.ebc";
  trtest::expect_invalid([&] { DistributedModelParallel d(twice, g, sgd(), options(W)); },
                         {"two embedding collections", "\"sparse.ebc\""}, g,
                         "two collections at one path");
}

namespace {

EmbeddingConfig seq_table(const std::string& name, int64_t rows, int64_t dim) {
  return {.name = name, .num_embeddings = rows, .embedding_dim = dim,
          .feature_names = {"f_" + name}, .data_type = DType::Float64};
}
const std::vector<EmbeddingConfig>& seq_tables() {
  static const std::vector<EmbeddingConfig> t{seq_table("s0", 9, 3), seq_table("s1", 5, 3)};
  return t;
}
std::vector<EmbeddingBagConfig> as_bags(const std::vector<EmbeddingConfig>& c) {
  std::vector<EmbeddingBagConfig> out;
  for (const auto& x : c) out.push_back(as_bag_config(x));
  return out;
}

// A bag collection and a sequence collection feeding one dense weight: the loss is
// sum(pooled @ w) + 0.5 * sum over the sequence rows of (row . v)^2.
struct BagsAndSequences : ShardableModel {
  std::shared_ptr<ShardedEmbeddingBagCollection> bags;
  std::shared_ptr<ShardedEmbeddingCollection> seqs;
  Variable w{from_vector<double>({0.5, -1, 0.25, 2, 1.5, -0.75}, {6, 1}), true, "w"};
  Variable v{from_vector<double>({1.0, -0.5, 0.25}, {3, 1}), true, "v"};
  std::string seq_path = "sparse.ec";

  std::vector<Variable> dense_parameters() override { return {w, v}; }
  std::vector<EmbeddingBagCollectionSlot> embedding_bag_collections() override {
    return {{.module_path = "sparse.ebc", .tables = sparse_tables(), .seed = 3,
             .install = [this](auto s) { bags = std::move(s); }}};
  }
  std::vector<EmbeddingCollectionSlot> embedding_collections() override {
    return {{.module_path = seq_path, .tables = seq_tables(), .seed = 5,
             .install = [this](auto s) { seqs = std::move(s); }}};
  }
};

Variable bag_seq_loss(const Variable& pooled, const std::vector<Variable>& rows,
                      const Variable& w, const Variable& v) {
  Variable loss = sum(matmul(pooled, w));
  for (const Variable& r : rows) {
    const Variable p = matmul(r, v);
    loss = add(loss, mul(sum(mul(p, p)), 0.5));
  }
  return loss;
}

void bag_seq_step(BagsAndSequences& m, DistributedModelParallel& dmp, int rank, int step) {
  const Variable pooled = m.bags->forward(features(sparse_tables(), rank + 10 * step)).values;
  const SequenceEmbeddings seq = m.seqs->forward(features(as_bags(seq_tables()), rank + 10 * step));
  // Each rank's loss is its mean over its 3 samples: with gradient division, the sharded step
  // then equals one process's on the global batch with the mean loss.
  mul(bag_seq_loss(pooled, seq.values_per_key, m.w, m.v), 1.0 / 3).backward();
  dmp.step();
  dmp.zero_grad();
}

// The concatenation of every rank's features (rank-major), as one batch.
KeyedJaggedTensor global_features(const std::vector<EmbeddingBagConfig>& tables, int W, int step) {
  std::vector<KeyedJaggedTensor> parts;
  for (int r = 0; r < W; ++r) parts.push_back(features(tables, r + 10 * step));
  std::vector<std::string> keys = parts[0].keys();
  std::vector<int64_t> lengths, ids;
  for (const std::string& k : keys)
    for (const auto& p : parts) {
      const JaggedTensor j = p[k];
      for (int64_t i = 0; i < j.lengths().numel(); ++i)
        lengths.push_back(static_cast<int64_t>(j.lengths().get_flat(i)));
      for (int64_t i = 0; i < j.values().numel(); ++i)
        ids.push_back(static_cast<int64_t>(j.values().get_flat(i)));
    }
  return KeyedJaggedTensor::from_lengths_sync(keys, from_vector(ids), from_vector(lengths));
}

}  // namespace

DG_CASE("DistributedModelParallel shards embedding collections (sequence) with the bag "
        "collections under one plan; training equals by hand and unsharded",
        "[torchrec][dmp]", 1, 2, 3, 4) {
  const int W = g.size(), me = g.rank();
  BagsAndSequences model;
  DistributedModelParallel dmp(model, g, sgd(), options(W));
  expect(model.bags != nullptr && model.seqs != nullptr, g, "a collection was not installed");
  expect(dmp.sharded_modules().size() == 2 && dmp.sharded_modules()[1]->name() == "sparse.ec",
         g, "the wrapper does not hold the sequence collection's module");
  const std::optional<ModuleShardingPlan> ec_plan = dmp.plan().get_plan_for_module("sparse.ec");
  expect(ec_plan.has_value() && dmp.plan().get_plan_for_module("sparse.ebc").has_value(), g,
         "the plan does not cover both collections:\n" + dmp.plan().to_string());
  for (const EmbeddingConfig& c : seq_tables())
    expect(ec_plan->at(c.name).sharding_type != ShardingType::TABLE_ROW_WISE, g,
           "the planner put a sequence table table_row_wise");
  expect(model.seqs->plan() == *ec_plan, g, "the installed sequence collection has another plan");

  // By hand, from the wrapper's plan.
  BagsAndSequences hand;
  hand.bags = std::make_shared<ShardedEmbeddingBagCollection>(
      sparse_tables(), false, *dmp.plan().get_plan_for_module("sparse.ebc"), g,
      options(W).sharded, options(W).fused, 3);
  hand.seqs = std::make_shared<ShardedEmbeddingCollection>(
      seq_tables(), *ec_plan, g, options(W).sharded, options(W).fused, 5);
  DistributedModelParallel by_hand({hand.w, hand.v},
                                   {std::make_shared<ShardedEbcModule>(hand.bags, "sparse.ebc"),
                                    std::make_shared<ShardedEcModule>(hand.seqs, "sparse.ec")},
                                   g, sgd());

  // Unsharded: the same tables, fused SGD, dense SGD, the mean loss over the global batch.
  EmbeddingBagCollection ebc(sparse_tables(), false, 3, options(W).fused);
  EmbeddingCollection ec(seq_tables(), 5, options(W).fused);
  Variable uw(model.w.value().clone(), true), uv(model.v.value().clone(), true);
  Sgd dense({uw, uv}, SgdOptions{.lr = 0.1});

  for (int step = 0; step < 2; ++step) {
    bag_seq_step(model, dmp, me, step);
    bag_seq_step(hand, by_hand, me, step);
    const Variable pooled = ebc.forward(global_features(sparse_tables(), W, step)).values;
    const SequenceEmbeddings seq = ec.forward(global_features(as_bags(seq_tables()), W, step));
    mul(bag_seq_loss(pooled, seq.values_per_key, uw, uv), 1.0 / (3.0 * W)).backward();
    dense.step();
    dense.zero_grad();
  }
  expect(equal(model.w.value(), hand.w.value()) && equal(model.v.value(), hand.v.value()), g,
         "the dense weights differ from the model sharded by hand");
  for (const auto& [key, t] : hand.seqs->state_dict())
    expect(equal(model.seqs->state_dict().at(key), t), g, "the sequence table " + key +
                                                               " differs from the one by hand");
  const double tol = 1e-12;
  expect(testing::max_rel_err(model.w.value(), uw.value()) <= tol &&
             testing::max_rel_err(model.v.value(), uv.value()) <= tol,
         g, "the dense weights differ from the unsharded model's");
  const auto seq_state = model.seqs->state_dict();
  for (const auto& [key, t] : ec.state_dict())
    expect(testing::max_rel_err(seq_state.at(key), t) <= tol, g,
           "the sequence table " + key + " differs from the unsharded one");
  const auto bag_state = model.bags->state_dict();
  for (const auto& [key, t] : ebc.state_dict())
    expect(testing::max_rel_err(bag_state.at(key), t) <= tol, g,
           "the bag table " + key + " differs from the unsharded one");

  // A caller's plan with table_row_wise for a sequence table: refused on every rank.
  std::vector<TableShape> s0, s1;
  for (const auto& c : sparse_tables()) s0.push_back({c.name, c.num_embeddings, c.embedding_dim});
  for (const auto& c : seq_tables()) s1.push_back({c.name, c.num_embeddings, c.embedding_dim});
  ShardingPlan twrw;
  twrw.set_plan_for_module("sparse.ebc", construct_module_sharding_plan(
                                             s0, {{"t0", table_wise(0)}, {"t1", row_wise()}}, W,
                                             W, "sparse.ebc"));
  twrw.set_plan_for_module("sparse.ec", construct_module_sharding_plan(
                                            s1, {{"s0", table_row_wise(0)}, {"s1", row_wise()}},
                                            W, W, "sparse.ec"));
  ModelShardingOptions given = options(W);
  given.plan = twrw;
  BagsAndSequences refused;
  trtest::expect_invalid([&] { DistributedModelParallel d(refused, g, sgd(), given); },
                         {"ShardedEmbeddingCollection", "table_row_wise", "\"s0\""}, g,
                         "table_row_wise for a sequence table");
  BagsAndSequences clash;
  clash.seq_path = "sparse.ebc";
  trtest::expect_invalid([&] { DistributedModelParallel d(clash, g, sgd(), options(W)); },
                         {"two embedding collections", "\"sparse.ebc\"", "embedding collection"},
                         g, "a bag and a sequence collection at one path");
}
