// Train pipelines: TrainPipelineSparseDist gives a model
// bit-identical to TrainPipelineBase (W = 1..4, every sharding type, and the planner's plan);
// both drain and end together, on every rank after the same step, when the data length is not a
// multiple of anything and when ranks have different numbers of batches (no hang); reset()
// starts a new pass. Ranks are threads (run_ranks); Catch2 assertions run on the main thread
// only, on what the ranks recorded.
#include <ferry/autograd/optimizer.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/run_ranks.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/train_pipeline/pipeline_test_helpers.h"

#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec;

namespace {

constexpr int kTables = 6;
constexpr int64_t kDim = 8;

std::vector<EmbeddingBagConfig> configs() {
  std::vector<EmbeddingBagConfig> out;
  const int64_t rows[kTables] = {50, 120, 300, 80, 500, 200};
  for (int t = 0; t < kTables; ++t) {
    EmbeddingBagConfig c;
    c.name = "t_" + std::to_string(t);
    c.num_embeddings = rows[t];
    c.embedding_dim = kDim;
    c.feature_names = {"cat_" + std::to_string(t)};
    c.pooling = t % 2 == 0 ? PoolingType::Mean : PoolingType::Sum;
    out.push_back(c);
  }
  return out;
}

SyntheticCriteo data(int64_t num_train) {
  SyntheticCriteoConfig cfg;
  cfg.num_sparse = kTables;
  for (const EmbeddingBagConfig& c : configs()) cfg.cardinalities.push_back(c.num_embeddings);
  cfg.num_train = num_train;
  cfg.num_test = 64;
  cfg.seed = 3;
  return SyntheticCriteo(cfg);
}

// Plans: "mixed" cycles every sharding type over the tables; "planner" is the planner's.
ModuleShardingPlan plan_for(const std::string& kind, int W) {
  std::vector<TableShape> shapes;
  for (const EmbeddingBagConfig& c : configs()) shapes.push_back({c.name, c.num_embeddings, kDim});
  if (kind == "planner") {
    Topology topo;
    topo.world_size = W;
    topo.local_world_size = W;
    topo.batch_size = 16;
    topo.memory_budget = int64_t{1} << 28;
    std::vector<PlannerTable> tables;
    for (const TableShape& s : shapes) {
      PlannerTable t;
      t.name = s.name;
      t.rows = s.rows;
      t.dim = s.dim;
      t.pooling_factor = 3;
      tables.push_back(t);
    }
    return *EmbeddingShardingPlanner(topo).plan(tables, "").get_plan_for_module("");
  }
  std::vector<int> all;
  for (int r = 0; r < W; ++r) all.push_back(r);
  std::map<std::string, ParameterShardingGenerator> gens;
  for (int t = 0; t < kTables; ++t) {
    ParameterShardingGenerator g;
    switch (t) {
      case 0: g = data_parallel(); break;
      case 1: g = table_wise(t % W); break;
      case 2: g = column_wise(all); break;
      case 3: g = row_wise(); break;
      case 4: g = table_column_wise(0); break;
      default: g = table_row_wise(0); break;
    }
    gens[shapes[static_cast<size_t>(t)].name] = g;
  }
  return construct_module_sharding_plan(shapes, gens, W, W);
}

struct Model {
  std::shared_ptr<ShardedEmbeddingBagCollection> sebc;
  std::unique_ptr<SparseArch> sparse;
  std::unique_ptr<DLRM> dlrm;
  std::unique_ptr<DistributedModelParallel> dmp;
  std::unique_ptr<TrainPipeline> pipeline;
};

std::unique_ptr<Model> build(const ModuleShardingPlan& plan, Group& world, bool pipelined) {
  auto m = std::make_unique<Model>();
  ShardedEmbeddingOptions so;
  so.local_size = world.size();
  FusedOptimizerConfig fused;
  fused.learning_rate = 0.5;
  m->sebc = std::make_shared<ShardedEmbeddingBagCollection>(configs(), false, plan, world, so,
                                                            fused, 11);
  std::vector<std::string> keys;
  for (const EmbeddingBagConfig& c : configs()) keys.push_back(c.feature_names[0]);
  ShardedEmbeddingBagCollection* sebc = m->sebc.get();
  m->sparse = std::make_unique<SparseArch>(
      keys, kDim, [sebc](const KeyedJaggedTensor& kjt) { return sebc->forward(kjt); });
  m->dlrm = std::make_unique<DLRM>(*m->sparse, testing::small_dlrm_config(kDim));
  m->dmp = std::make_unique<DistributedModelParallel>(
      m->dlrm->dense_parameters(),
      std::vector<std::shared_ptr<ShardedModule>>{std::make_shared<ShardedEbcModule>(m->sebc)},
      world, testing::momentum_sgd);
  PipelineModel pm;
  pm.dmp = m->dmp.get();
  DLRM* dlrm = m->dlrm.get();
  pm.dense_step = [dlrm](const Batch& b, const SparseOutputs& sparse) {
    const PooledEmbeddings& pooled = sparse.pooled();
    Variable logits = dlrm->forward_with_embeddings(
        Variable(b.dense), SparseArchOutput{pooled.keys, pooled.length_per_key, pooled.values});
    return DenseStepResult{logits, bce_with_logits(logits, b.labels)};
  };
  if (pipelined) m->pipeline = std::make_unique<TrainPipelineSparseDist>(pm);
  else m->pipeline = std::make_unique<TrainPipelineBase>(pm);
  return m;
}

// Everything a rank's model holds after training, as tensors (local shards, dense params).
std::vector<Tensor> snapshot(const Model& m) {
  std::vector<Tensor> out;
  for (const auto& [name, shards] : m.sebc->local_state_dict())
    for (const LocalShard& s : shards) out.push_back(s.tensor.clone());
  for (const Variable& p : m.dlrm->dense_parameters()) out.push_back(p.value().clone());
  return out;
}

// A source that gives at most `limit` batches of another one.
class Limited : public BatchSource {
 public:
  Limited(BatchSource& inner, int64_t limit) : inner_(&inner), limit_(limit) {}
  std::optional<Batch> next_batch() override {
    if (given_ >= limit_) return std::nullopt;
    ++given_;
    return inner_->next_batch();
  }
  int64_t num_batches() const override { return std::min(limit_, inner_->num_batches()); }
  void reset() override {
    given_ = 0;
    inner_->reset();
  }

 private:
  BatchSource* inner_;
  int64_t limit_;
  int64_t given_ = 0;
};

// A source that puts id `rows` (one past the end of table t_2) into feature cat_2 of its
// `bad`-th batch (0-based).
class OutOfRange : public BatchSource {
 public:
  OutOfRange(BatchSource& inner, int64_t bad, int64_t rows)
      : inner_(&inner), bad_(bad), rows_(rows) {}
  std::optional<Batch> next_batch() override {
    std::optional<Batch> b = inner_->next_batch();
    if (b && given_++ == bad_) {
      const std::vector<int64_t> offsets = b->sparse.offset_per_key();
      const int64_t first = offsets[2] + (offsets[3] - offsets[2]) / 2;  // a cat_2 id
      Tensor values = b->sparse.values();  // shares the batch's storage
      values.data<int64_t>()[first] = rows_;
    }
    return b;
  }
  int64_t num_batches() const override { return inner_->num_batches(); }
  void reset() override {
    given_ = 0;
    inner_->reset();
  }

 private:
  BatchSource* inner_;
  int64_t bad_, rows_;
  int64_t given_ = 0;
};

}  // namespace

TEST_CASE("train pipeline: sparse-dist is bit-identical to base", "[train_pipeline]") {
  const SyntheticCriteo d = data(16 * 4 * 6);
  for (const std::string kind : {"mixed", "planner"}) {
    for (int W = 1; W <= 4; ++W) {
      INFO("plan " << kind << ", W = " << W);
      std::mutex mu;
      bool identical = true;
      int64_t steps_base = -1, steps_pipe = -1;
      run_ranks(W, [&](Group& world) {
        const ModuleShardingPlan plan = plan_for(kind, W);
        ShardOptions so;
        so.batch_size = 16;
        so.rank = world.rank();
        so.world_size = W;
        std::vector<std::vector<Tensor>> logits(2);
        std::vector<std::vector<Tensor>> state(2);
        int64_t steps[2] = {0, 0};
        for (int pipelined = 0; pipelined < 2; ++pipelined) {
          std::unique_ptr<Model> m = build(plan, world, pipelined == 1);
          SyntheticCriteoSource source(d, Split::Train, so);
          // Two epochs: reset() must start a clean second pass.
          for (int epoch = 0; epoch < 2; ++epoch) {
            source.reset();
            m->pipeline->reset();
            for (const TrainStepOutput& out : m->pipeline->execute_all_batches(source)) {
              logits[static_cast<size_t>(pipelined)].push_back(out.logits);
              ++steps[pipelined];
            }
          }
          state[static_cast<size_t>(pipelined)] = snapshot(*m);
        }
        bool same = logits[0].size() == logits[1].size() && state[0].size() == state[1].size();
        for (size_t i = 0; same && i < logits[0].size(); ++i) same = equal(logits[0][i], logits[1][i]);
        for (size_t i = 0; same && i < state[0].size(); ++i) same = equal(state[0][i], state[1][i]);
        std::lock_guard lock(mu);
        identical = identical && same;
        steps_base = steps[0];
        steps_pipe = steps[1];
      });
      CHECK(identical);
      CHECK(steps_base == 2 * (24 / W));  // 24 batches of 16, two epochs
      CHECK(steps_pipe == steps_base);
    }
  }
}

TEST_CASE("train pipeline: uneven data ends on every rank after the same step", "[train_pipeline]") {
  for (int W = 2; W <= 4; ++W) {
    for (int pipelined = 0; pipelined < 2; ++pipelined) {
      INFO("W = " << W << (pipelined ? ", sparse-dist" : ", base"));
      // 16-sample batches of 16 * (3W + 1) + 7 samples: 3W + 2 batches, the last one 7 samples;
      // without even_batches ranks 0 and 1 get one batch more than the others for W > 2 (rank
      // 1's last is short; at W = 2 both have 4). Then rank r is limited to 2 + r batches: the ranks run out at different steps.
      const SyntheticCriteo d = data(16 * (3 * W + 1) + 7);
      // 3W batches, the last one (rank W-1's third) 7 samples: every rank trains 3 steps, one of
      // them short. The plan holds every sharding type, so each output dist (table_row_wise's
      // reduce-scatter-v within the node included) meets ranks with different batch sizes.
      const SyntheticCriteo d_short = data(16 * (3 * W - 1) + 7);
      std::vector<int64_t> steps_short(static_cast<size_t>(W), -1);
      std::vector<int64_t> last_size(static_cast<size_t>(W), -1);
      std::mutex mu;
      std::vector<int64_t> steps(static_cast<size_t>(W), -1);
      std::vector<int64_t> steps_limited(static_cast<size_t>(W), -1);
      std::vector<int64_t> steps_none(static_cast<size_t>(W), -1);
      run_ranks(W, [&](Group& world) {
        const ModuleShardingPlan plan = plan_for("mixed", W);
        std::unique_ptr<Model> m = build(plan, world, pipelined == 1);
        ShardOptions so;
        so.batch_size = 16;
        so.rank = world.rank();
        so.world_size = W;
        so.drop_last = false;
        so.even_batches = false;
        SyntheticCriteoSource source(d, Split::Train, so);
        const int64_t a = static_cast<int64_t>(m->pipeline->execute_all_batches(source).size());
        // Progress after the end keeps returning nullopt without any collective.
        const bool still_ended = !m->pipeline->progress(source).has_value();
        source.reset();
        m->pipeline->reset();
        Limited limited(source, 2 + world.rank());
        const int64_t b = static_cast<int64_t>(m->pipeline->execute_all_batches(limited).size());
        // A rank without any batch: nobody trains.
        source.reset();
        m->pipeline->reset();
        Limited none(source, world.rank() == W - 1 ? 0 : 5);
        const int64_t c = static_cast<int64_t>(m->pipeline->execute_all_batches(none).size());
        SyntheticCriteoSource short_source(d_short, Split::Train, so);
        m->pipeline->reset();
        std::vector<TrainStepOutput> outs = m->pipeline->execute_all_batches(short_source);
        std::lock_guard lock(mu);
        steps_short[static_cast<size_t>(world.rank())] = static_cast<int64_t>(outs.size());
        last_size[static_cast<size_t>(world.rank())] = outs.empty() ? -1 : outs.back().labels.numel();
        steps[static_cast<size_t>(world.rank())] = still_ended ? a : -2;
        steps_limited[static_cast<size_t>(world.rank())] = b;
        steps_none[static_cast<size_t>(world.rank())] = c;
      });
      for (int r = 0; r < W; ++r) {
        CHECK(steps[static_cast<size_t>(r)] == (3 * W + 2) / W);  // the fewest any rank has
        CHECK(steps_limited[static_cast<size_t>(r)] == 2);
        CHECK(steps_none[static_cast<size_t>(r)] == 0);
        CHECK(steps_short[static_cast<size_t>(r)] == 3);
        CHECK(last_size[static_cast<size_t>(r)] == (r == W - 1 ? 7 : 16));
      }
    }
  }
}

TEST_CASE("train pipeline: a bad batch on one rank raises the same error on every rank at the "
          "same step, and the ranks stay in step", "[train_pipeline]") {
  // The check of each batch rides on the agreement the pipelines exchange before its input
  // dist: rank 1's third batch has an id out of range; every rank must raise the check's
  // InvalidArgument naming rank 1, the table, the feature and the id, after training the same
  // two steps, and an all_reduce afterwards must still pair up (no rank left a collective
  // behind).
  constexpr int W = 3;
  for (int pipelined = 0; pipelined < 2; ++pipelined) {
    INFO((pipelined ? "sparse-dist" : "base"));
    const SyntheticCriteo d = data(16 * W * 6);
    std::vector<testing::RefusalSeen> seen(W);
    run_ranks(W, [&](Group& world) {
      const ModuleShardingPlan plan = plan_for("mixed", W);
      std::unique_ptr<Model> m = build(plan, world, pipelined == 1);
      ShardOptions so;
      so.batch_size = 16;
      so.rank = world.rank();
      so.world_size = W;
      SyntheticCriteoSource source(d, Split::Train, so);
      OutOfRange bad(source, world.rank() == 1 ? 2 : 1000, configs()[2].num_embeddings);
      seen[static_cast<size_t>(world.rank())] = testing::run_until_refused(*m->pipeline, bad, world);
    });
    for (int r = 0; r < W; ++r) {
      const testing::RefusalSeen& s = seen[static_cast<size_t>(r)];
      INFO("rank " << r << ": " << s.error);
      CHECK(s.error.find("rank 1's input") != std::string::npos);
      CHECK(s.error.find("t_2") != std::string::npos);
      CHECK(s.error.find("cat_2") != std::string::npos);
      CHECK(s.error.find("id 300 is out of range [0, 300)") != std::string::npos);
      // The base pipeline checks batch 2 before its step; the sparse-dist one one step earlier,
      // when batch 2's input dist would start beside batch 1's step.
      CHECK(s.trained == (pipelined ? 1 : 2));
      CHECK(s.after == W);
    }
  }
}
