// The first differentiable collectives (all_reduce, all_gather; convention P) through the
// distributed gradcheck on the local transport, and the gradcheck's own ability to tell the two
// adjoint conventions apart.
#include "autograd/function.h"
#include "collectives/collectives.h"
#include "collectives/differentiable.h"
#include "collectives/distributed_gradcheck.h"
#include "collectives/run_ranks.h"

#include <catch2/catch.hpp>

#include <mutex>

using namespace ferry;
using Catch::Matchers::Contains;

namespace {

// Runs `check` on every rank of an n-rank local world and returns each rank's result; the
// Catch assertions run on the main thread afterwards.
std::vector<DistributedGradcheckResult> on_ranks(
    int n, const std::function<DistributedGradcheckResult(Group&)>& check) {
  std::vector<DistributedGradcheckResult> results(n);
  std::mutex mutex;
  run_ranks(n, [&](Group& world) {
    DistributedGradcheckResult r = check(world);
    std::lock_guard lock(mutex);
    results[world.rank()] = r;
  });
  return results;
}

// `stride` > 1 when the check ran in sub-groups: ranks r and r + stride*k share a verdict.
void require_all_ok(const std::vector<DistributedGradcheckResult>& results,
                    int64_t expected_elements, size_t stride = 0) {
  for (size_t r = 0; r < results.size(); ++r) {
    INFO(results[r].message);
    CHECK(results[r].ok);
    CHECK(results[r].elements_checked == expected_elements);
    const size_t first = stride == 0 ? 0 : r % stride;
    CHECK(results[r].message == results[first].message);  // the same verdict across the group
  }
}

// Convention R's all_gather backward: "keep my slice of my own gradient" (spec §0).
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

TEST_CASE("differentiable all_reduce: the true adjoint of the sum of per-rank losses") {
  for (int w : {1, 2, 3, 4}) {
    for (Shape shape : {Shape{3}, Shape{2, 2}, Shape{0, 2}, Shape{}}) {
      INFO("world " << w << " shape " << shape_str(shape));
      auto results = on_ranks(w, [&](Group& g) {
        auto fn = [&](const std::vector<Variable>& in) {
          return std::vector<Variable>{all_reduce(in[0], g)};
        };
        return distributed_gradcheck(fn, {rank_input(shape, g.rank())}, g);
      });
      require_all_ok(results, w * shape_numel(shape));
    }
  }
}

TEST_CASE("differentiable all_gather: the true adjoint, even and zero-size blocks") {
  for (int w : {1, 2, 3, 4}) {
    for (int64_t rows : {0, 1, 3}) {
      INFO("world " << w << " rows " << rows);
      auto results = on_ranks(w, [&](Group& g) {
        auto fn = [&](const std::vector<Variable>& in) {
          return std::vector<Variable>{all_gather(in[0], g)};
        };
        return distributed_gradcheck(fn, {rank_input({rows, 2}, g.rank())}, g);
      });
      require_all_ok(results, w * rows * 2);
    }
  }
}

TEST_CASE("several collectives in a row, mean objective, two inputs") {
  auto results = on_ranks(3, [&](Group& g) {
    auto fn = [&](const std::vector<Variable>& in) {
      Variable gathered = all_gather(in[0], g);
      return std::vector<Variable>{all_reduce(gathered, g), all_reduce(in[1], g)};
    };
    DistributedGradcheckOptions options;
    options.objective = GradcheckObjective::Mean;
    return distributed_gradcheck(fn, {rank_input({2, 2}, g.rank()), rank_input({3}, g.rank())},
                                 g, options);
  });
  require_all_ok(results, 3 * 7);
}

TEST_CASE("sub-groups: each half of the world checks its own collectives") {
  auto results = on_ranks(4, [&](Group& world) {
    Group half = world.split(world.rank() % 2, world.rank());
    auto fn = [&](const std::vector<Variable>& in) {
      return std::vector<Variable>{all_gather(all_reduce(in[0], half), half)};
    };
    return distributed_gradcheck(fn, {rank_input({2}, world.rank())}, half);
  });
  require_all_ok(results, 2 * 2, /*stride=*/2);
}

TEST_CASE("the distributed gradcheck tells the two adjoint conventions apart") {
  // Convention R's all_gather is right for a replicated (once-counted) loss and wrong for the
  // sum of per-rank losses; P's all_reduce is right for the sum and W times too large for the
  // replicated loss. A gradcheck that passed both ways would be checking nothing.
  auto keep_slice = [](Group& g) {
    return [g](const std::vector<Variable>& in) {
      return apply(std::make_shared<AllGatherKeepSlice>(g), {in[0]});
    };
  };
  auto check = [&](int w, auto make_fn, GradcheckObjective objective) {
    return on_ranks(w, [&](Group& g) {
      DistributedGradcheckOptions options;
      options.objective = objective;
      return distributed_gradcheck(make_fn(g), {rank_input({2, 3}, g.rank())}, g, options);
    });
  };
  auto all_reduce_p = [](Group& g) {
    return [g](const std::vector<Variable>& in) {
      return std::vector<Variable>{all_reduce(in[0], g)};
    };
  };
  require_all_ok(check(3, keep_slice, GradcheckObjective::Replicated), 3 * 6);
  auto wrong = check(3, keep_slice, GradcheckObjective::Sum);
  for (const auto& r : wrong) {
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.message, Contains("FAILED"));
  }
  require_all_ok(check(2, all_reduce_p, GradcheckObjective::Sum), 2 * 6);
  for (const auto& r : check(2, all_reduce_p, GradcheckObjective::Replicated)) {
    CHECK_FALSE(r.ok);
    CHECK(std::abs(r.analytic - 2 * r.numeric) < 1e-6 * (1 + std::abs(r.numeric)));
  }
}

TEST_CASE("a rank whose loss ignores a collective still runs its backward") {
  // Rank 0's loss does not use the all_reduce output. Torch would skip the all_reduce's
  // backward there and the other ranks would wait forever; ferry's tape runs it with a zero
  // gradient, so every rank gets the right gradient and nothing hangs.
  std::vector<std::vector<double>> grads(3);
  std::mutex mutex;
  run_ranks(3, [&](Group& g) {
    Variable x(full({2}, 1.0 + g.rank(), DType::Float64), true, "x");
    Variable y = all_reduce(x, g);
    Variable loss = g.rank() == 0 ? apply(std::make_shared<WeightedSum>(5.0), {x})[0]
                                  : apply(std::make_shared<WeightedSum>(1.0), {y})[0];
    loss.backward();
    std::lock_guard lock(mutex);
    grads[g.rank()] = x.grad().to_vector<double>();
  });
  // d/dx_k of 5*sum(x_0) + sum(y) + sum(y), y = x_0 + x_1 + x_2: 2 from the all_reduce, plus 5
  // on rank 0.
  CHECK(grads[0] == std::vector<double>{7.0, 7.0});
  CHECK(grads[1] == std::vector<double>{2.0, 2.0});
  CHECK(grads[2] == std::vector<double>{2.0, 2.0});
}

TEST_CASE("differentiable collectives reject what they cannot differentiate") {
  run_ranks(2, [&](Group& g) {
    CHECK_THROWS_AS(all_reduce(Variable(ones({2}, DType::Int32)), g), InvalidArgument);
    CHECK_THROWS_AS(all_gather(Variable(ones({}, DType::Float32)), g), InvalidArgument);
    CHECK_THROWS_AS(all_reduce(Variable(ones({2})), Group()), InvalidArgument);
  });
}
