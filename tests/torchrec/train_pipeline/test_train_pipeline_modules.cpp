// Train pipelines over several sharded modules: three EmbeddingBagCollections (one table-wise,
// row-wise and column-wise, one all data_parallel, one node-wise: table_row_wise and
// table_column_wise), two EmbeddingCollections (one fed a derived KJT through PipelineModel::inputs)
// and a plain ShardedModule the pipelines do not pipeline. Sparse-dist is bit-identical to base;
// every module's next input dist is in flight during the current step (started before the dense
// step, received after it); the input checks ride on the agreement (as many collectives per step
// with the check on as off, and as many in both pipelines); a bad id for an EmbeddingCollection
// raises its error on every rank. Ranks are threads (run_ranks); Catch2 assertions run on the
// main thread only, on what the ranks recorded.
#include <ferry/autograd/ops.h>
#include <ferry/autograd/optimizer.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/run_ranks.h>
#include <ferry/collectives/torchrec/torchrec.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec;

namespace {

constexpr int kFeatures = 6;
constexpr int64_t kDim = 8;        // the bag collections' (the DLRM's) dim
constexpr int64_t kSeqDim = 4;     // the sequence collections'
const int64_t kData[kFeatures] = {50, 100, 300, 80, 500, 200};  // ids of cat_f in [0, kData[f])

std::string feature(int f) { return "cat_" + std::to_string(f); }

std::vector<EmbeddingBagConfig> bag_configs(int first) {  // t_first .. t_{first+2}
  const int64_t rows[kFeatures] = {50, 120, 300, 80, 500, 200};
  std::vector<EmbeddingBagConfig> out;
  for (int f = first; f < first + 3; ++f)
    out.push_back({.name = "t_" + std::to_string(f), .num_embeddings = rows[f],
                   .embedding_dim = kDim, .feature_names = {feature(f)},
                   .pooling = f % 2 == 0 ? PoolingType::Mean : PoolingType::Sum});
  return out;
}

// "sparse.ec": e_0 on cat_1 has 110 rows (the data's ids go to 100, t_1's to 120), so id 105 is
// an error of this collection alone.
std::vector<EmbeddingConfig> ec_configs() {
  return {{.name = "e_0", .num_embeddings = 110, .embedding_dim = kSeqDim, .feature_names = {feature(1)}},
          {.name = "e_1", .num_embeddings = 500, .embedding_dim = kSeqDim, .feature_names = {feature(4)}},
          {.name = "e_2", .num_embeddings = 50, .embedding_dim = kSeqDim, .feature_names = {feature(0)}}};
}
std::vector<EmbeddingConfig> ec2_configs() {
  return {{.name = "f_0", .num_embeddings = 300, .embedding_dim = kSeqDim, .feature_names = {feature(2)}},
          {.name = "f_1", .num_embeddings = 200, .embedding_dim = kSeqDim, .feature_names = {feature(5)}}};
}

template <class Config>
ModuleShardingPlan plan_of(const std::vector<Config>& configs,
                           const std::vector<ParameterShardingGenerator>& gens, int W) {
  std::vector<TableShape> shapes;
  std::map<std::string, ParameterShardingGenerator> by_name;
  for (size_t t = 0; t < configs.size(); ++t) {
    shapes.push_back({configs[t].name, configs[t].num_embeddings, configs[t].embedding_dim});
    by_name[configs[t].name] = gens[t];
  }
  return construct_module_sharding_plan(shapes, by_name, W, W);
}

SyntheticCriteo data(int64_t num_train) {
  SyntheticCriteoConfig cfg;
  cfg.num_sparse = kFeatures;
  cfg.cardinalities.assign(kData, kData + kFeatures);
  cfg.num_train = num_train;
  cfg.num_test = 64;
  cfg.seed = 7;
  return SyntheticCriteo(cfg);
}

// What a rank saw, in order: a module starting / receiving batch k's input dist, the dense step
// of batch k.
enum Kind { kStart, kDone, kDense };
struct Event {
  Kind kind;
  int module;  // -1 for kDense
  int64_t batch;
};

// A pipelined module that records when the pipeline starts and finishes its input dists (its
// k-th input_dist_checked is batch k of the pass).
class Traced : public ShardedEmbeddingModule {
 public:
  Traced(std::shared_ptr<ShardedEmbeddingModule> inner, int index, std::vector<Event>* log)
      : inner_(std::move(inner)), index_(index), log_(log) {}
  std::string name() const override { return inner_->name(); }
  std::vector<Variable> data_parallel_parameters() override { return inner_->data_parallel_parameters(); }
  void fused_optimizer_step() override { inner_->fused_optimizer_step(); }
  void zero_grad() override { inner_->zero_grad(); }
  const Group& world() const override { return inner_->world(); }
  torchrec::detail::InputCheckStatus input_check_status(const KeyedJaggedTensor& f) const override {
    return inner_->input_check_status(f);
  }
  void raise_input_check(const std::vector<int64_t>& all,
                         const torchrec::detail::InputCheckStatus& mine) const override {
    inner_->raise_input_check(all, mine);
  }
  ShardedInputDistAwaitable input_dist_checked(ShardedEmbeddingContext& ctx,
                                               const KeyedJaggedTensor& f) override {
    const int64_t k = started_++;
    log_->push_back({kStart, index_, k});
    ShardedInputDistAwaitable a = inner_->input_dist_checked(ctx, f);
    const int index = index_;
    std::vector<Event>* log = log_;
    a.then([index, k, log](Awaitable<std::vector<KeyedJaggedTensor>> phase2) {
      phase2.then([index, k, log](std::vector<KeyedJaggedTensor> received) {
        log->push_back({kDone, index, k});
        return received;
      });
      return phase2;
    });
    return a;
  }
  LazyAwaitable<EmbeddingModuleOutput> compute_and_output_dist(
      ShardedEmbeddingContext& ctx, const std::vector<KeyedJaggedTensor>& d) override {
    return inner_->compute_and_output_dist(ctx, d);
  }
  void new_pass() { started_ = 0; }

 private:
  std::shared_ptr<ShardedEmbeddingModule> inner_;
  int index_;
  std::vector<Event>* log_;
  int64_t started_ = 0;
};

// A sharded module without stages: stepped by the dmp, never pipelined.
class Counter : public ShardedModule {
 public:
  std::string name() const override { return "counter"; }
  std::vector<Variable> data_parallel_parameters() override { return {}; }
  void fused_optimizer_step() override { ++steps; }
  int64_t steps = 0;
};

struct Multi {
  Group world;
  std::shared_ptr<ShardedEmbeddingBagCollection> ebc_a, ebc_dp, ebc_node;
  std::shared_ptr<ShardedEmbeddingCollection> ec, ec2;
  std::shared_ptr<Counter> counter;
  std::vector<std::shared_ptr<Traced>> traced;
  std::unique_ptr<SparseArch> arch;
  std::unique_ptr<DLRM> dlrm;
  std::unique_ptr<DistributedModelParallel> dmp;
  std::unique_ptr<TrainPipeline> pipeline;
  std::vector<Event> events;
  std::vector<uint64_t> seq_at_dense;  // the group's collectives issued when each dense step began
  int64_t dense_steps = 0;

  void new_pass() {
    events.clear();
    seq_at_dense.clear();
    dense_steps = 0;
    for (auto& t : traced) t->new_pass();
  }
};

struct MultiOptions {
  bool pipelined = true;
  bool traced = false;
  bool check_inputs = true;
};

std::unique_ptr<Multi> build_multi(Group& world, MultiOptions o) {
  const int W = world.size();
  std::vector<int> all;
  for (int r = 0; r < W; ++r) all.push_back(r);
  auto m = std::make_unique<Multi>();
  m->world = world;
  ShardedEmbeddingOptions so;
  so.local_size = W;
  so.check_inputs = o.check_inputs;
  FusedOptimizerConfig fused;
  fused.learning_rate = 0.5;
  m->ebc_a = std::make_shared<ShardedEmbeddingBagCollection>(
      bag_configs(0), false,
      plan_of(bag_configs(0), {table_wise(W - 1), row_wise(), column_wise(all)}, W), world, so,
      fused, 11);
  m->ebc_dp = std::make_shared<ShardedEmbeddingBagCollection>(
      bag_configs(3), false,
      plan_of(bag_configs(3), {data_parallel(), data_parallel(), data_parallel()}, W), world, so,
      fused, 12);
  m->ebc_node = std::make_shared<ShardedEmbeddingBagCollection>(
      bag_configs(0), false,
      plan_of(bag_configs(0), {table_row_wise(0), table_column_wise(0), table_row_wise(0)}, W),
      world, so, fused, 15);
  m->ec = std::make_shared<ShardedEmbeddingCollection>(
      ec_configs(), plan_of(ec_configs(), {table_wise(0), row_wise(), data_parallel()}, W), world,
      so, fused, 13);
  m->ec2 = std::make_shared<ShardedEmbeddingCollection>(
      ec2_configs(), plan_of(ec2_configs(), {column_wise(all), table_wise(W - 1)}, W), world, so,
      fused, 14);
  m->counter = std::make_shared<Counter>();
  std::vector<std::shared_ptr<ShardedModule>> modules{
      std::make_shared<ShardedEbcModule>(m->ebc_a, "sparse.ebc_a"),
      std::make_shared<ShardedEbcModule>(m->ebc_dp, "sparse.ebc_dp"), m->counter,
      std::make_shared<ShardedEbcModule>(m->ebc_node, "sparse.ebc_node"),
      std::make_shared<ShardedEcModule>(m->ec, "sparse.ec"),
      std::make_shared<ShardedEcModule>(m->ec2, "sparse.ec2")};
  if (o.traced) {
    int index = 0;
    for (auto& module : modules) {
      auto stages = std::dynamic_pointer_cast<ShardedEmbeddingModule>(module);
      if (!stages) continue;
      m->traced.push_back(std::make_shared<Traced>(stages, index++, &m->events));
      module = m->traced.back();
    }
  }
  std::vector<std::string> keys;
  for (int f = 0; f < kFeatures; ++f) keys.push_back(feature(f));
  m->arch = std::make_unique<SparseArch>(keys, kDim,
                                         [](const KeyedJaggedTensor&) { return Variable(); });
  DlrmConfig dc;
  dc.dense_in_features = 13;
  dc.dense_arch_layer_sizes = {16, kDim};
  dc.over_arch_layer_sizes = {16, 1};
  dc.seed = 5;
  m->dlrm = std::make_unique<DLRM>(*m->arch, dc);
  m->dmp = std::make_unique<DistributedModelParallel>(
      m->dlrm->dense_parameters(), modules, world,
      [](std::vector<Variable> p) -> std::unique_ptr<Optimizer> {
        return std::make_unique<Sgd>(std::move(p), SgdOptions{.lr = 0.05, .momentum = 0.9});
      });
  PipelineModel pm;
  pm.dmp = m->dmp.get();
  // ec2 reads cat_5 and cat_2 only, in that order: its input dist finds them by name.
  pm.inputs["sparse.ec2"] = [](const Batch& b) { return b.sparse.permute({5, 2}); };
  Multi* self = m.get();
  pm.dense_step = [self](const Batch& b, const SparseOutputs& s) {
    self->events.push_back({kDense, -1, self->dense_steps++});
    self->seq_at_dense.push_back(self->world.sequence_number());
    const PooledEmbeddings& a = s.pooled("sparse.ebc_a");
    const PooledEmbeddings& d = s.pooled("sparse.ebc_dp");
    SparseArchOutput pooled{a.keys, a.length_per_key, cat({a.values, d.values}, 1)};
    pooled.keys.insert(pooled.keys.end(), d.keys.begin(), d.keys.end());
    pooled.length_per_key.insert(pooled.length_per_key.end(), d.length_per_key.begin(),
                                 d.length_per_key.end());
    Variable logits = self->dlrm->forward_with_embeddings(Variable(b.dense), pooled);
    Variable loss = bce_with_logits(logits, b.labels);
    const Variable node = s.pooled("sparse.ebc_node").values;
    loss = loss + sum(node * node) * (0.01 / static_cast<double>(b.size()));
    for (const char* name : {"sparse.ec", "sparse.ec2"})
      for (const Variable& v : s.sequence(name).values_per_key)
        loss = loss + sum(v * v) * (0.01 / static_cast<double>(b.size()));
    return DenseStepResult{logits, loss};
  };
  if (o.pipelined) m->pipeline = std::make_unique<TrainPipelineSparseDist>(pm);
  else m->pipeline = std::make_unique<TrainPipelineBase>(pm);
  return m;
}

std::vector<Tensor> snapshot(const Multi& m) {
  std::vector<Tensor> out;
  auto add = [&](const std::map<std::string, std::vector<LocalShard>>& state) {
    for (const auto& [name, shards] : state)
      for (const LocalShard& s : shards) out.push_back(s.tensor.clone());
  };
  add(m.ebc_a->local_state_dict());
  add(m.ebc_dp->local_state_dict());
  add(m.ebc_node->local_state_dict());
  add(m.ec->local_state_dict());
  add(m.ec2->local_state_dict());
  for (const Variable& p : m.dlrm->dense_parameters()) out.push_back(p.value().clone());
  return out;
}

ShardOptions shard(const Group& world) {
  ShardOptions so;
  so.batch_size = 16;
  so.rank = world.rank();
  so.world_size = world.size();
  return so;
}

// Position of the first event of this kind, module and batch (-1: none).
long position(const std::vector<Event>& log, Kind kind, int module, int64_t batch) {
  for (size_t i = 0; i < log.size(); ++i)
    if (log[i].kind == kind && log[i].module == module && log[i].batch == batch)
      return static_cast<long>(i);
  return -1;
}

}  // namespace

TEST_CASE("train pipeline: several EBCs and ECs (all six sharding types among them) and a plain "
          "sharded module: sparse-dist is bit-identical to base",
          "[train_pipeline]") {
  const SyntheticCriteo d = data(16 * 4 * 5);
  for (int W = 1; W <= 4; ++W) {
    INFO("W = " << W);
    std::mutex mu;
    bool identical = true;
    std::vector<int64_t> steps(2, -1), counted(2, -1);
    run_ranks(W, [&](Group& world) {
      std::vector<std::vector<Tensor>> logits(2), state(2);
      int64_t n[2] = {0, 0}, c[2] = {0, 0};
      for (int pipelined = 0; pipelined < 2; ++pipelined) {
        std::unique_ptr<Multi> m = build_multi(world, {.pipelined = pipelined == 1});
        SyntheticCriteoSource source(d, Split::Train, shard(world));
        for (const TrainStepOutput& out : m->pipeline->execute_all_batches(source)) {
          logits[static_cast<size_t>(pipelined)].push_back(out.logits);
          ++n[pipelined];
        }
        state[static_cast<size_t>(pipelined)] = snapshot(*m);
        c[pipelined] = m->counter->steps;
      }
      bool same = logits[0].size() == logits[1].size() && state[0].size() == state[1].size();
      for (size_t i = 0; same && i < logits[0].size(); ++i) same = equal(logits[0][i], logits[1][i]);
      for (size_t i = 0; same && i < state[0].size(); ++i) same = equal(state[0][i], state[1][i]);
      std::lock_guard lock(mu);
      identical = identical && same;
      steps = {n[0], n[1]};
      counted = {c[0], c[1]};
    });
    CHECK(identical);
    CHECK(steps[0] == 20 / W);
    CHECK(steps[1] == steps[0]);
    // The plain module is stepped by the dmp once per step, in both pipelines.
    CHECK(counted[0] == steps[0]);
    CHECK(counted[1] == steps[0]);
  }
}

TEST_CASE("train pipeline: during each step of the sparse-dist pipeline every module's next "
          "input dist is in flight", "[train_pipeline]") {
  // Batch k+1's input dist of every module must be started before batch k's dense step and
  // received only after it. The base pipeline, which has no overlap, must fail the same
  // check for every step (the check sees the difference).
  constexpr int W = 2;
  const SyntheticCriteo d = data(16 * W * 6);
  std::mutex mu;
  std::vector<std::string> problems;
  std::vector<long> overlapped_steps(2, -1), modules_seen(2, -1), steps(2, -1);
  run_ranks(W, [&](Group& world) {
    for (int pipelined = 0; pipelined < 2; ++pipelined) {
      std::unique_ptr<Multi> m =
          build_multi(world, {.pipelined = pipelined == 1, .traced = true});
      SyntheticCriteoSource source(d, Split::Train, shard(world));
      const auto n = static_cast<int64_t>(m->pipeline->execute_all_batches(source).size());
      long overlapped = 0;  // steps k < n - 1 where every module's batch k+1 was in flight
      std::string problem;
      for (int64_t k = 0; k + 1 < n; ++k) {
        const long dense = position(m->events, kDense, -1, k);
        bool all = true;
        for (int mod = 0; mod < static_cast<int>(m->traced.size()); ++mod) {
          const long started = position(m->events, kStart, mod, k + 1);
          const long done = position(m->events, kDone, mod, k + 1);
          const bool in_flight = started >= 0 && started < dense && dense < done;
          all = all && in_flight;
          if (!in_flight && pipelined && problem.empty())
            problem = "rank " + std::to_string(world.rank()) + ", module " +
                      m->traced[static_cast<size_t>(mod)]->name() + ", step " +
                      std::to_string(k) + ": batch " + std::to_string(k + 1) +
                      "'s input dist started at event " + std::to_string(started) +
                      ", received at " + std::to_string(done) + ", dense step at " +
                      std::to_string(dense);
        }
        overlapped += all ? 1 : 0;
      }
      std::lock_guard lock(mu);
      if (!problem.empty()) problems.push_back(problem);
      overlapped_steps[static_cast<size_t>(pipelined)] = overlapped;
      modules_seen[static_cast<size_t>(pipelined)] = static_cast<long>(m->traced.size());
      steps[static_cast<size_t>(pipelined)] = static_cast<long>(n);
    }
  });
  std::string all_problems;
  for (const std::string& p : problems) all_problems += p + "\n";
  INFO(all_problems);
  CHECK(problems.empty());
  CHECK(modules_seen[1] == 5);  // the bag and the sequence collections, not the plain one
  CHECK(steps[1] == 6);
  CHECK(overlapped_steps[1] == steps[1] - 1);  // every step but the last (no next batch)
  CHECK(overlapped_steps[0] == 0);
}

TEST_CASE("train pipeline: the input checks ride on the agreement: as many collectives per step "
          "with the checks on as off, in both pipelines", "[train_pipeline]") {
  // The collectives a step issues on the group (its sequence number, read at each dense step)
  // depend on the data (the data_parallel tables' reduction), so the counts are compared step
  // by step: an input dist that ran a check exchange of its own would add one per module and
  // step with the checks on.
  constexpr int W = 3;
  const SyntheticCriteo d = data(16 * W * 6);
  std::mutex mu;
  // Collectives between dense steps k and k+1 (the drain's last interval left out), by
  // (pipelined, check_inputs), rank 0's; whether every rank saw the same.
  std::map<std::pair<int, int>, std::vector<uint64_t>> per_step;
  bool ranks_agree = true;
  run_ranks(W, [&](Group& world) {
    for (int pipelined = 0; pipelined < 2; ++pipelined) {
      for (int check = 0; check < 2; ++check) {
        std::unique_ptr<Multi> m = build_multi(
            world, {.pipelined = pipelined == 1, .check_inputs = check == 1});
        SyntheticCriteoSource source(d, Split::Train, shard(world));
        m->pipeline->execute_all_batches(source);
        std::vector<uint64_t> deltas;
        for (size_t k = 0; k + 2 < m->seq_at_dense.size(); ++k)
          deltas.push_back(m->seq_at_dense[k + 1] - m->seq_at_dense[k]);
        std::lock_guard lock(mu);
        auto [it, first] = per_step.try_emplace({pipelined, check}, deltas);
        ranks_agree = ranks_agree && (first || it->second == deltas);
      }
    }
  });
  auto show = [](const std::vector<uint64_t>& v) {
    std::string out;
    for (uint64_t x : v) out += std::to_string(x) + " ";
    return out;
  };
  const std::vector<uint64_t> base = per_step[std::make_pair(0, 1)];
  const std::vector<uint64_t> base_off = per_step[std::make_pair(0, 0)];
  const std::vector<uint64_t> sparse_dist = per_step[std::make_pair(1, 1)];
  const std::vector<uint64_t> sparse_dist_off = per_step[std::make_pair(1, 0)];
  INFO("collectives per step: base " << show(base) << "/ sparse-dist " << show(sparse_dist)
                                     << "(checks off: " << show(base_off) << "/ "
                                     << show(sparse_dist_off) << ")");
  CHECK(ranks_agree);
  CHECK(sparse_dist.size() == 4);
  CHECK(sparse_dist == sparse_dist_off);
  CHECK(base == base_off);
  CHECK(sparse_dist == base);
}

TEST_CASE("train pipeline: a bad id for an EmbeddingCollection raises its error on every rank at "
          "the same step", "[train_pipeline]") {
  // id 115 of cat_1 is in range for the bag table t_1 (120 rows), out of range for the sequence
  // table e_0 (110 rows): only the EC's check, carried on the agreement, can catch it.
  constexpr int W = 3;
  for (int pipelined = 0; pipelined < 2; ++pipelined) {
    INFO((pipelined ? "sparse-dist" : "base"));
    const SyntheticCriteo d = data(16 * W * 6);
    std::mutex mu;
    std::vector<std::string> errors(W);
    std::vector<int64_t> trained(W, -1);
    std::vector<double> after(W, -1);
    run_ranks(W, [&](Group& world) {
      std::unique_ptr<Multi> m = build_multi(world, {.pipelined = pipelined == 1});
      SyntheticCriteoSource source(d, Split::Train, shard(world));
      int64_t n = 0, given = 0;
      std::string error;
      class Bad : public BatchSource {
       public:
        Bad(BatchSource& in, bool bad, int64_t* given) : in_(&in), bad_(bad), given_(given) {}
        std::optional<Batch> next_batch() override {
          std::optional<Batch> b = in_->next_batch();
          if (b && bad_ && (*given_)++ == 2) {
            const std::vector<int64_t> offsets = b->sparse.offset_per_key();
            Tensor values = b->sparse.values();  // shares the batch's storage
            values.data<int64_t>()[offsets[1]] = 115;  // cat_1's first id
          }
          return b;
        }
        int64_t num_batches() const override { return in_->num_batches(); }
        void reset() override { in_->reset(); }

       private:
        BatchSource* in_;
        bool bad_;
        int64_t* given_;
      } bad(source, world.rank() == 1, &given);
      try {
        while (m->pipeline->progress(bad)) ++n;
      } catch (const InvalidArgument& e) {
        error = e.what();
      }
      Tensor one = full({1}, 1.0, DType::Float64);
      all_reduce(one, world).wait();
      std::lock_guard lock(mu);
      errors[static_cast<size_t>(world.rank())] = error;
      trained[static_cast<size_t>(world.rank())] = n;
      after[static_cast<size_t>(world.rank())] = one.item();
    });
    for (int r = 0; r < W; ++r) {
      const std::string& e = errors[static_cast<size_t>(r)];
      INFO("rank " << r << ": " << e);
      CHECK(e.find("ShardedEmbeddingCollection::input_dist: rank 1's input") != std::string::npos);
      CHECK(e.find("table \"e_0\", feature \"cat_1\", sample ") != std::string::npos);
      CHECK(e.find("id 115 is out of range [0, 110)") != std::string::npos);
      CHECK(trained[static_cast<size_t>(r)] == (pipelined ? 1 : 2));
      CHECK(after[static_cast<size_t>(r)] == W);
    }
  }
}

TEST_CASE("train pipeline: a model the pipeline cannot route is refused at construction",
          "[train_pipeline]") {
  std::mutex mu;
  std::vector<std::string> errors;
  run_ranks(1, [&](Group& world) {
    auto ebc = std::make_shared<ShardedEmbeddingBagCollection>(
        bag_configs(0), false,
        plan_of(bag_configs(0), {table_wise(0), table_wise(0), table_wise(0)}, 1), world);
    auto dense = [](std::vector<Variable> p) -> std::unique_ptr<Optimizer> {
      return std::make_unique<Sgd>(std::move(p), SgdOptions{.lr = 0.1});
    };
    auto step = [](const Batch&, const SparseOutputs&) { return DenseStepResult{}; };
    DistributedModelParallel twice({}, {std::make_shared<ShardedEbcModule>(ebc, "a"),
                                        std::make_shared<ShardedEbcModule>(ebc, "a")},
                                   world, dense);
    DistributedModelParallel once({}, {std::make_shared<ShardedEbcModule>(ebc, "a")}, world,
                                  dense);
    std::vector<std::string> got;
    for (int which = 0; which < 2; ++which) {
      PipelineModel pm;
      pm.dmp = which == 0 ? &twice : &once;
      pm.dense_step = step;
      if (which == 1) pm.inputs["b"] = [](const Batch& b) { return b.sparse; };
      try {
        TrainPipelineSparseDist pipeline(pm);
        got.push_back("");
      } catch (const InvalidArgument& e) {
        got.push_back(e.what());
      }
    }
    std::lock_guard lock(mu);
    errors = got;
  });
  REQUIRE(errors.size() == 2);
  CHECK(errors[0].find("two pipelined modules are named \"a\"") != std::string::npos);
  CHECK(errors[1].find("an input is given for \"b\", which is no pipelined module (pipelined: "
                       "\"a\")") != std::string::npos);

  // A module whose ranks are not the dmp's: its input dists would not match the agreement's
  // ranks. Each rank's module runs on that rank alone, the dmp on both.
  std::vector<std::string> other_group(2);
  run_ranks(2, [&](Group& world) {
    Group alone = world.split(world.rank(), 0);
    auto ebc = std::make_shared<ShardedEmbeddingBagCollection>(
        bag_configs(0), false,
        plan_of(bag_configs(0), {table_wise(0), table_wise(0), table_wise(0)}, 1), alone);
    DistributedModelParallel dmp({}, {std::make_shared<ShardedEbcModule>(ebc, "a")}, world,
                                 [](std::vector<Variable> p) -> std::unique_ptr<Optimizer> {
                                   return std::make_unique<Sgd>(std::move(p), SgdOptions{});
                                 });
    PipelineModel pm;
    pm.dmp = &dmp;
    pm.dense_step = [](const Batch&, const SparseOutputs&) { return DenseStepResult{}; };
    std::string got;
    try {
      TrainPipelineBase pipeline(pm);
    } catch (const InvalidArgument& e) {
      got = e.what();
    }
    std::lock_guard lock(mu);
    other_group[static_cast<size_t>(world.rank())] = got;
  });
  for (const std::string& e : other_group) {
    INFO(e);
    CHECK(e.find("module \"a\" runs on") != std::string::npos);
    CHECK(e.find("expected the DistributedModelParallel's") != std::string::npos);
  }
}
