// The model the multi-module train pipeline tests share: three sharded EmbeddingBagCollections
// (one table-wise, row-wise and column-wise, one all data_parallel, one node-wise:
// table_row_wise and table_column_wise), two sharded EmbeddingCollections (one fed a derived KJT
// through PipelineModel::inputs) and a plain ShardedModule the pipelines do not pipeline, with
// what each rank saw (input dists started and received, dense steps, collectives issued).
#pragma once

#include <ferry/autograd/ops.h>
#include <ferry/autograd/optimizer.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/train_pipeline/pipeline_test_helpers.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ferry::torchrec::testing::pipeline_modules {

inline constexpr int kFeatures = 6;
inline constexpr int64_t kDim = 8;        // the bag collections' (the DLRM's) dim
inline constexpr int64_t kSeqDim = 4;     // the sequence collections'
inline const int64_t kData[kFeatures] = {50, 100, 300, 80, 500, 200};  // ids of cat_f in [0, kData[f])

inline std::string feature(int f) { return "cat_" + std::to_string(f); }

inline std::vector<EmbeddingBagConfig> bag_configs(int first) {  // t_first .. t_{first+2}
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
inline std::vector<EmbeddingConfig> ec_configs() {
  return {{.name = "e_0", .num_embeddings = 110, .embedding_dim = kSeqDim, .feature_names = {feature(1)}},
          {.name = "e_1", .num_embeddings = 500, .embedding_dim = kSeqDim, .feature_names = {feature(4)}},
          {.name = "e_2", .num_embeddings = 50, .embedding_dim = kSeqDim, .feature_names = {feature(0)}}};
}
inline std::vector<EmbeddingConfig> ec2_configs() {
  return {{.name = "f_0", .num_embeddings = 300, .embedding_dim = kSeqDim, .feature_names = {feature(2)}},
          {.name = "f_1", .num_embeddings = 200, .embedding_dim = kSeqDim, .feature_names = {feature(5)}}};
}

template <class Config>
inline ModuleShardingPlan plan_of(const std::vector<Config>& configs,
                                  const std::vector<ParameterShardingGenerator>& gens, int W) {
  std::vector<TableShape> shapes;
  std::map<std::string, ParameterShardingGenerator> by_name;
  for (size_t t = 0; t < configs.size(); ++t) {
    shapes.push_back({configs[t].name, configs[t].num_embeddings, configs[t].embedding_dim});
    by_name[configs[t].name] = gens[t];
  }
  return construct_module_sharding_plan(shapes, by_name, W, W);
}

inline SyntheticCriteo data(int64_t num_train) {
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
  std::unique_ptr<ShardedModuleContext> create_context() const override {
    return inner_->create_context();
  }
  ShardedInputDistAwaitable input_dist_checked(ShardedModuleContext& ctx,
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
      ShardedModuleContext& ctx, const std::vector<KeyedJaggedTensor>& d) override {
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

inline std::unique_ptr<Multi> build_multi(Group& world, MultiOptions o) {
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
  m->dlrm = std::make_unique<DLRM>(*m->arch, small_dlrm_config(kDim));
  m->dmp = std::make_unique<DistributedModelParallel>(m->dlrm->dense_parameters(), modules, world,
                                                      momentum_sgd);
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

inline std::vector<Tensor> snapshot(const Multi& m) {
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

inline ShardOptions shard(const Group& world) {
  ShardOptions so;
  so.batch_size = 16;
  so.rank = world.rank();
  so.world_size = world.size();
  return so;
}

// Position of the first event of this kind, module and batch (-1: none).
inline long position(const std::vector<Event>& log, Kind kind, int module, int64_t batch) {
  for (size_t i = 0; i < log.size(); ++i)
    if (log[i].kind == kind && log[i].module == module && log[i].batch == batch)
      return static_cast<long>(i);
  return -1;
}

}  // namespace ferry::torchrec::testing::pipeline_modules
