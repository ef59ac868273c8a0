// DistributedModelParallel (collectives/torchrec/model_parallel/model_parallel.h) with a fake
// sharded module: a "sharded" table that differs per rank and is stepped by the module's own
// optimizer, a data-parallel table reduced and stepped with the dense parameters, the pipeline
// stages composing into forward.
#include <ferry/autograd/ops.h>
#include <ferry/autograd/optimizer.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/model_parallel/model_parallel.h>
#include <ferry/runtime/error.h>
#include "tests/differentiable/spmd_gradcheck.h"

#include <cmath>
#include <string>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec;
using dgtest::expect;

namespace {

// Input: a Variable of row indices' values (float64 [n, 1]); the "input dist" scales it, the
// "compute" multiplies with the local shard, the "output dist" sums. What matters here is that
// forward runs the two stages in order and that the step hooks are called.
class FakeSharded : public ShardedModuleStages<Variable, Variable, Variable> {
 public:
  FakeSharded(int rank, double lr)
      : shard_(uniform({3, 2}, -1, 1, 300 + rank, DType::Float64), true, "shard"),
        replicated_(uniform({2}, -1, 1, 400 + rank, DType::Float64), true, "dp_table"),
        lr_(lr) {}

  std::string name() const override { return "fake"; }
  std::vector<Variable> data_parallel_parameters() override { return {replicated_}; }
  void fused_optimizer_step() override {
    ++steps;
    if (!shard_.grad().defined()) return;
    Tensor w = shard_.value();
    for (int64_t k = 0; k < w.numel(); ++k) {
      w.set_flat(k, w.get_flat(k) - lr_ * shard_.grad().get_flat(k));
    }
  }
  void zero_grad() override {
    ++zeroed;
    shard_.zero_grad();
  }

  Awaitable<Variable> input_dist(const Variable& input) override {
    stages += "i";
    return NoWait<Variable>(input * 2.0);
  }
  Awaitable<Variable> compute_and_output_dist(Variable dist_input) override {
    stages += "c";
    Variable out = matmul(dist_input, shard_) + replicated_;
    return NoWait<Variable>(out);
  }

  Variable shard_, replicated_;
  double lr_;
  int steps = 0, zeroed = 0;
  std::string stages;
};

}  // namespace

DG_CASE("dmp: broadcast, averaged replicated gradients, both optimizers stepped", "[torchrec][dmp]",
        1, 2, 3) {
  const double lr = 0.5;
  auto fake = std::make_shared<FakeSharded>(g.rank(), lr);
  Variable dense(uniform({2, 1}, -1, 1, 500 + g.rank(), DType::Float64), true, "dense");
  DistributedModelParallel dmp({dense}, {fake}, g, [&](std::vector<Variable> p) {
    return std::make_unique<Sgd>(std::move(p), SgdOptions{.lr = lr});
  }, {.reducer = {.bucket_cap_bytes = 1}});

  // The replicated parameters are rank 0's; the shard stays this rank's own.
  expect(dmp.replicated_parameters().size() == 2, g, "expected dense + dp_table replicated");
  expect(equal(dense.value(), uniform({2, 1}, -1, 1, 500, DType::Float64)), g,
         "dense weights not broadcast from rank 0");
  expect(equal(fake->replicated_.value(), uniform({2}, -1, 1, 400, DType::Float64)), g,
         "data-parallel table not broadcast from rank 0");
  expect(equal(fake->shard_.value(), uniform({3, 2}, -1, 1, 300 + g.rank(), DType::Float64)), g,
         "the sharded table was touched by the broadcast");
  const Tensor dense0 = dense.value().clone();
  const Tensor table0 = fake->replicated_.value().clone();
  const Tensor shard0 = fake->shard_.value().clone();

  // loss_r = sum(forward(x_r) @ dense) with x_r a [4, 3] batch of rank r.
  const auto batch = [](int r) { return uniform({4, 3}, -1, 1, 600 + r, DType::Float64); };
  Variable out = fake->forward(Variable(batch(g.rank())));
  expect(fake->stages == "ic", g, "forward ran the stages as " + fake->stages);
  Variable loss = sum(matmul(out, dense));
  loss.backward();
  dmp.step();
  expect(fake->steps == 1, g, "fused_optimizer_step not called once");

  // Hand-computed: h_r = 2 x_r, out_r = h_r S_r + t (t broadcast over rows). With 1 = ones(4):
  // d/d dense = out_r^T 1, d/d t = 4 dense^T (every row), d/d S_r = h_r^T 1 dense^T.
  const int W = g.size();
  Tensor want_dense = zeros({2, 1}, DType::Float64);
  Tensor want_table = zeros({2}, DType::Float64);
  for (int r = 0; r < W; ++r) {
    const Tensor x = batch(r);
    const Tensor s = uniform({3, 2}, -1, 1, 300 + r, DType::Float64);
    for (int64_t n = 0; n < 4; ++n) {
      for (int64_t j = 0; j < 2; ++j) {
        double o = table0.get_flat(j);
        for (int64_t k = 0; k < 3; ++k) o += 2 * x.get_flat(n * 3 + k) * s.get_flat(k * 2 + j);
        want_dense.set_flat(j, want_dense.get_flat(j) + o / W);
      }
    }
    for (int64_t j = 0; j < 2; ++j) {
      want_table.set_flat(j, want_table.get_flat(j) + 4 * dense0.get_flat(j) / W);
    }
  }
  const Tensor x = batch(g.rank());
  double worst = 0;
  for (int64_t j = 0; j < 2; ++j) {
    worst = std::max(worst, std::abs(dense.value().get_flat(j) -
                                     (dense0.get_flat(j) - lr * want_dense.get_flat(j))));
    worst = std::max(worst, std::abs(fake->replicated_.value().get_flat(j) -
                                     (table0.get_flat(j) - lr * want_table.get_flat(j))));
  }
  for (int64_t k = 0; k < 3; ++k) {
    double hk = 0;
    for (int64_t n = 0; n < 4; ++n) hk += 2 * x.get_flat(n * 3 + k);
    for (int64_t j = 0; j < 2; ++j) {
      const double want = shard0.get_flat(k * 2 + j) - lr * hk * dense0.get_flat(j);
      worst = std::max(worst, std::abs(fake->shard_.value().get_flat(k * 2 + j) - want));
    }
  }
  expect(worst < 1e-12, g, "a parameter differs from its hand-computed update by " +
                               std::to_string(worst));

  dmp.zero_grad();
  expect(fake->zeroed == 1 && !dense.grad().defined() && !fake->replicated_.grad().defined() &&
             !fake->shard_.grad().defined(),
         g, "zero_grad did not reach every optimizer");

  // Inside no_sync, step() neither communicates nor steps.
  {
    auto guard = dmp.no_sync();
    const uint64_t before = g.sequence_number();
    sum(matmul(fake->forward(Variable(batch(g.rank()))), dense)).backward();
    dmp.step();
    expect(g.sequence_number() == before && fake->steps == 1, g, "no_sync stepped");
  }
}

DG_CASE("dmp: a model without replicated parameters, and bad arguments", "[torchrec][dmp]", 1, 2) {
  class ShardOnly : public ShardedModule {
   public:
    std::string name() const override { return "shard-only"; }
    std::vector<Variable> data_parallel_parameters() override { return {}; }
    void fused_optimizer_step() override { ++steps; }
    int steps = 0;
  };
  auto m = std::make_shared<ShardOnly>();
  DistributedModelParallel dmp({}, {m}, g, nullptr);
  dmp.step();
  expect(m->steps == 1, g, "fused step not called");
  bool threw = false;
  try {
    dmp.reducer();
  } catch (const InvalidArgument&) {
    threw = true;
  }
  expect(threw, g, "reducer() of a model without replicated parameters did not throw");
  threw = false;
  try {
    DistributedModelParallel bad({}, {nullptr}, g, nullptr);
  } catch (const InvalidArgument& e) {
    threw = std::string(e.what()).find("sharded module 0 is null") != std::string::npos;
  }
  expect(threw, g, "a null module was accepted");
  threw = false;
  try {
    Variable w(zeros({2}, DType::Float64), true, "w");
    DistributedModelParallel bad({w}, {}, g, nullptr);
  } catch (const InvalidArgument& e) {
    threw = std::string(e.what()).find("no dense optimizer factory") != std::string::npos;
  }
  expect(threw, g, "replicated parameters without an optimizer factory were accepted");
}
