// The first differentiable collectives (all_reduce, all_gather; convention P) through the
// distributed gradcheck, and the gradcheck's own ability to tell the two adjoint conventions
// apart. SPMD cases: on local worlds here, under mpiexec in tests/mpi.
#include <ferry/autograd/function.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/differentiable/differentiable.h>
#include <ferry/collectives/differentiable/distributed_gradcheck.h>
#include <ferry/collectives/run_ranks.h>
#include "spmd_gradcheck.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>

using namespace ferry;
using dgtest::expect;
using dgtest::expect_passed;

namespace {

// Convention R's all_gather backward: "keep my slice of my own gradient" (differentiable.h).
class AllGatherKeepSlice final : public Function {
 public:
  explicit AllGatherKeepSlice(Group g) : group_(std::move(g)) {}
  std::string name() const override { return "all_gather_keep_slice"; }
  bool is_collective() const override { return true; }
  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override {
    Shape shape = in[0].shape();
    shape[0] *= group_.size();
    Tensor y = empty(shape, in[0].dtype());
    ferry::all_gather(in[0], y, group_).wait();
    return {y};
  }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) override {
    const int64_t rows = g[0].size(0) / group_.size();
    return {g[0].narrow(0, group_.rank() * rows, rows).clone()};
  }

 private:
  Group group_;
};

// sum(x * c) for a constant tensor c: a local loss term that a test can make ignore a
// collective's output.
class WeightedSum final : public Function {
 public:
  explicit WeightedSum(double c) : c_(c) {}
  std::string name() const override { return "weighted_sum"; }
  std::vector<Tensor> forward(Context& ctx, const std::vector<Tensor>& in) override {
    ctx.set("shape", in[0].shape());
    return {full({}, c_ * in[0].to(DType::Float64).vec<double>().sum(), in[0].dtype())};
  }
  std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& g) override {
    return {full(ctx.get<Shape>("shape"), c_ * g[0].item(), g[0].dtype())};
  }

 private:
  double c_;
};

Tensor rank_input(const Shape& shape, int rank) {
  return uniform(shape, -1.0, 1.0, 100 + rank, DType::Float64);
}

}  // namespace

DG_CASE("differentiable all_reduce: the true adjoint of the sum of per-rank losses",
        "[all_reduce]", 1, 2, 3, 4) {
  for (Shape shape : {Shape{3}, Shape{2, 2}, Shape{0, 2}, Shape{}}) {
    auto fn = [&](const std::vector<Variable>& in) {
      return std::vector<Variable>{all_reduce(in[0], g)};
    };
    expect_passed(distributed_gradcheck(fn, {rank_input(shape, g.rank())}, g),
                  g.size() * shape_numel(shape), g);
  }
}

DG_CASE("differentiable all_gather: the true adjoint, even and zero-size blocks",
        "[all_gather]", 1, 2, 3, 4) {
  for (int64_t rows : {0, 1, 3}) {
    auto fn = [&](const std::vector<Variable>& in) {
      return std::vector<Variable>{all_gather(in[0], g)};
    };
    expect_passed(distributed_gradcheck(fn, {rank_input({rows, 2}, g.rank())}, g),
                  g.size() * rows * 2, g);
  }
}

DG_CASE("several collectives in a row, mean objective, two inputs", "[all_gather][all_reduce]",
        1, 3) {
  auto fn = [&](const std::vector<Variable>& in) {
    Variable gathered = all_gather(in[0], g);
    return std::vector<Variable>{all_reduce(gathered, g), all_reduce(in[1], g)};
  };
  DistributedGradcheckOptions options;
  options.objective = GradcheckObjective::Mean;
  expect_passed(distributed_gradcheck(fn, {rank_input({2, 2}, g.rank()),
                                           rank_input({3}, g.rank())}, g, options),
                g.size() * 7, g);
}

DG_CASE("sub-groups: each half of the world checks its own collectives", "[groups]", 2, 4) {
  Group half = g.split(g.rank() % 2, g.rank());
  auto fn = [&](const std::vector<Variable>& in) {
    return std::vector<Variable>{all_gather(all_reduce(in[0], half), half)};
  };
  expect_passed(distributed_gradcheck(fn, {rank_input({2}, g.rank())}, half),
                half.size() * 2, half);
}

DG_CASE("the distributed gradcheck tells the two adjoint conventions apart", "[conventions]",
        2, 3) {
  // Convention R's all_gather is right for a replicated (once-counted) loss and wrong for the
  // sum of per-rank losses; P's all_reduce is right for the sum and W times too large for the
  // replicated loss. A gradcheck that passed both ways would be checking nothing.
  auto keep_slice = [&](const std::vector<Variable>& in) {
    return apply(std::make_shared<AllGatherKeepSlice>(g), {in[0]});
  };
  auto all_reduce_p = [&](const std::vector<Variable>& in) {
    return std::vector<Variable>{all_reduce(in[0], g)};
  };
  const Tensor x = rank_input({2, 3}, g.rank());
  DistributedGradcheckOptions replicated;
  replicated.objective = GradcheckObjective::Replicated;
  expect_passed(distributed_gradcheck(keep_slice, {x}, g, replicated), g.size() * 6, g);
  expect_passed(distributed_gradcheck(all_reduce_p, {x}, g), g.size() * 6, g);

  auto wrong = distributed_gradcheck(keep_slice, {x}, g);
  expect(!wrong.ok, g, "R's all_gather passed under the sum objective: " + wrong.message);
  auto too_large = distributed_gradcheck(all_reduce_p, {x}, g, replicated);
  expect(!too_large.ok, g, "P's all_reduce passed under the replicated objective");
  expect(std::abs(too_large.analytic - g.size() * too_large.numeric) <
             1e-6 * (1 + std::abs(too_large.numeric)),
         g, "P's all_reduce under the replicated objective is not W times too large: " +
                too_large.message);
}

DG_CASE("a rank whose loss ignores a collective still runs its backward", "[tape]", 1, 2, 3) {
  // Rank 0's loss does not use the all_reduce output. Torch would skip the all_reduce's
  // backward there and the other ranks would wait forever; ferry's tape runs it with a zero
  // gradient, so every rank gets the right gradient and nothing hangs.
  Variable x(full({2}, 1.0 + g.rank(), DType::Float64), true, "x");
  Variable y = all_reduce(x, g);
  Variable loss = g.rank() == 0 ? apply(std::make_shared<WeightedSum>(5.0), {x})[0]
                                : apply(std::make_shared<WeightedSum>(1.0), {y})[0];
  loss.backward();
  // d/dx_k of 5 sum(x_0) + sum_{r >= 1} sum(y), y = sum_k x_k: W - 1 from the all_reduce, plus
  // 5 on rank 0.
  const double expected = (g.size() - 1) + (g.rank() == 0 ? 5.0 : 0.0);
  expect(equal(x.grad(), full({2}, expected, DType::Float64)), g,
         "x.grad() is " + x.grad().to_string() + ", expected " + std::to_string(expected));
}

TEST_CASE("differentiable collectives reject what they cannot differentiate") {
  std::atomic<int> rejected{0};
  run_ranks(2, [&](Group& g) {
    auto count = [&](auto&& call) {
      try {
        call();
      } catch (const InvalidArgument&) {
        ++rejected;
      }
    };
    count([&] { all_reduce(Variable(ones({2}, DType::Int32)), g); });
    count([&] { all_gather(Variable(ones({}, DType::Float32)), g); });
    count([&] { all_reduce(Variable(ones({2})), Group()); });
  });
  CHECK(rejected == 6);
}
