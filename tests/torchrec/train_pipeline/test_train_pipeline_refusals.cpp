// What the train pipelines refuse: a bad id for one EmbeddingCollection of several sharded
// modules (pipeline_modules_case.h) raises its error on every rank at the same step; a model
// whose modules the pipeline cannot route (two of one name, an input for no module, a module on
// other ranks than the DistributedModelParallel's) is refused at construction. Ranks are threads
// (run_ranks); Catch2 assertions run on the main thread only, on what the ranks recorded.
#include <ferry/autograd/ops.h>
#include <ferry/autograd/optimizer.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/run_ranks.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/train_pipeline/pipeline_modules_case.h"

#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec;
using namespace ferry::torchrec::testing::pipeline_modules;

TEST_CASE("train pipeline: a bad id for an EmbeddingCollection raises its error on every rank at "
          "the same step", "[train_pipeline]") {
  // id 115 of cat_1 is in range for the bag table t_1 (120 rows), out of range for the sequence
  // table e_0 (110 rows): only the EC's check, carried on the agreement, can catch it.
  constexpr int W = 3;
  for (int pipelined = 0; pipelined < 2; ++pipelined) {
    INFO((pipelined ? "sparse-dist" : "base"));
    const SyntheticCriteo d = data(16 * W * 6);
    std::vector<testing::RefusalSeen> seen(W);
    run_ranks(W, [&](Group& world) {
      std::unique_ptr<Multi> m = build_multi(world, {.pipelined = pipelined == 1});
      SyntheticCriteoSource source(d, Split::Train, shard(world));
      int64_t given = 0;
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
      seen[static_cast<size_t>(world.rank())] = testing::run_until_refused(*m->pipeline, bad, world);
    });
    for (int r = 0; r < W; ++r) {
      const testing::RefusalSeen& s = seen[static_cast<size_t>(r)];
      const std::string& e = s.error;
      INFO("rank " << r << ": " << e);
      CHECK(e.find("ShardedEmbeddingCollection::input_dist: rank 1's input") != std::string::npos);
      CHECK(e.find("table \"e_0\", feature \"cat_1\", sample ") != std::string::npos);
      CHECK(e.find("id 115 is out of range [0, 110)") != std::string::npos);
      CHECK(s.trained == (pipelined ? 1 : 2));
      CHECK(s.after == W);
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
