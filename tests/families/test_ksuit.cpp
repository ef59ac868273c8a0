// ksuit's gathers and reductions (collectives/ksuit/ksuit.h): the differentiable ones through the
// distributed gradcheck under the objective of their convention, at world sizes 1-4 and on a
// sub-group; hand-computed gathers and reductions at W = 2; the nograd forms and the sampler reordering of the clipped gather; the
// argument checks.
#include <ferry/collectives/ksuit/ksuit.h>

#include <ferry/autograd/ops.h>
#include "compat_checks.h"
#include "tests/differentiable/spmd_gradcheck.h"

#include <functional>
#include <string>
#include <vector>

using namespace ferry;
using namespace compat;

DG_CASE("ksuit all_gather_grad (P) along any batch_dim: gradcheck", "[ksuit]", 1, 2, 3, 4) {
  struct Form {
    Shape shape;
    int64_t batch_dim;
  };
  const Form forms[] = {{{2}, 0}, {{}, 0}, {{}, -1}, {{2, 2}, 1}, {{1, 2}, -1},
                        {{0, 2}, 0}, {{0, 2}, 1}};
  for (const Group& group : compat::world_and_subgroup(g)) {
    for (const Form& f : forms) {
      check(group,
            [&](const Variable& v) { return ksuit::all_gather_grad(v, group, f.batch_dim); },
            rank_input(f.shape, g.rank()), group.size() * shape_numel(f.shape),
            objective(GradcheckObjective::Sum));
    }
    for (const Shape& shape : {Shape{2}, Shape{}, Shape{0, 2}}) {
      check(group, [&](const Variable& v) { return ksuit::all_gather_grad_autograd(v, group); },
            rank_input(shape, g.rank()), group.size() * shape_numel(shape),
            objective(GradcheckObjective::Sum));
    }
  }
}

DG_CASE("ksuit all_gather_grad_overwrite and the grad all_reduces (R): gradcheck", "[ksuit]", 1,
        2, 3, 4) {
  for (const Group& group : compat::world_and_subgroup(g)) {
    for (const Shape& shape : {Shape{2}, Shape{0, 2}, Shape{}}) {
      const Tensor x = rank_input(shape, g.rank());
      const int64_t elements = group.size() * shape_numel(shape);
      const auto replicated = objective(GradcheckObjective::Replicated);
      check(group,
            [&](const Variable& v) { return ksuit::all_gather_grad_overwrite(v, group); }, x,
            elements, replicated);
      check(group, [&](const Variable& v) { return ksuit::all_reduce_sum_grad(v, group); }, x,
            elements, replicated);
      check(group, [&](const Variable& v) { return ksuit::all_reduce_mean_grad(v, group); }, x,
            elements, replicated);
    }
  }
}

namespace {

using Gather = std::function<Variable(const Variable&, const Group&)>;

// One of the hand-computed gathers on x of rank k = xs[k], seeded with G of rank k = gs[k]: y is the
// concatenation `y`, dx of rank k is dxs[k].
void check_gather_case(const Group& g, const std::string& what, const Gather& gather,
               const std::vector<Tensor>& xs, const Tensor& y_want, const std::vector<Tensor>& gs,
               const std::vector<Tensor>& dxs) {
  Variable x(pick(g, xs), true, "x");
  Variable y = gather(x, g);
  expect_equal(y.value(), y_want, g, what + ": y");
  y.backward(pick(g, gs));
  expect_equal(x.grad(), pick(g, dxs), g, what + ": dx");
}

void tc10(const Group& g) {
  const Gather grad = [](const Variable& v, const Group& gr) {
    return ksuit::all_gather_grad(v, gr);
  };
  const Gather autograd = ksuit::all_gather_grad_autograd;
  const Gather overwrite = ksuit::all_gather_grad_overwrite;
  const std::vector<Tensor> x = {tensor<double>({1, 2}), tensor<double>({3, 4})};
  const Tensor y = tensor<double>({1, 2, 3, 4});
  const std::vector<Tensor> G = {tensor<double>({1, 2, 3, 4}),
                                 tensor<double>({10, 20, 30, 40})};
  // x0 = [1,2], x1 = [3,4] -> y = [1,2,3,4]; G0 = [1,2,3,4], G1 = [10,20,30,40]:
  // all_gather_grad (and _autograd, the same along dim 0) sum the ranks' G at my rows, the
  // overwrite form takes my rows of my own G only.
  const std::vector<Tensor> summed = {tensor<double>({11, 22}), tensor<double>({33, 44})};
  check_gather_case(g, "all_gather_grad", grad, x, y, G, summed);
  check_gather_case(g, "all_gather_grad_autograd", autograd, x, y, G, summed);
  check_gather_case(g, "all_gather_grad_overwrite", overwrite, x, y, G,
            {tensor<double>({1, 2}), tensor<double>({30, 40})});
  // Scalars x0 = 5, x1 = 7 -> y = [5,7] (ksuit unsqueezes them). G0 = [1,0], G1 = [0,1]: dx = 1
  // on both; the overwrite form, with G0 = [1,2], G1 = [10,20]: dx0 = 1, dx1 = 20.
  const std::vector<Tensor> s = {full({}, 5, DType::Float64), full({}, 7, DType::Float64)};
  const Tensor one = full({}, 1, DType::Float64);
  check_gather_case(g, "scalars, all_gather_grad", grad, s, tensor<double>({5, 7}),
            {tensor<double>({1, 0}), tensor<double>({0, 1})}, {one, one});
  check_gather_case(g, "scalars, all_gather_grad_overwrite", overwrite, s, tensor<double>({5, 7}),
            {tensor<double>({1, 2}), tensor<double>({10, 20})},
            {one, full({}, 20, DType::Float64)});
  // Only slot 0 used: loss_r = (r+1) * sum(slot 0), x = [1,2] on both -> dx0 = [3,3],
  // dx1 = [0,0] (rank 1 still takes part in the backward's reduce_scatter).
  {
    Variable x(tensor<double>({1, 2}), true, "x");
    Variable y = ksuit::all_gather_grad(x, g);
    Variable loss = mul(sum(narrow(y, 0, 0, 2)), static_cast<double>(g.rank() + 1));
    loss.backward();
    expect_equal(x.grad(), pick(g, {tensor<double>({3, 3}), tensor<double>({0, 0})}), g,
                 "only slot 0 used: dx");
  }
  // batch_dim 1 (by the definition: rank k's x is block k along dim 1, and its gradient is that
  // block of sum_r G_r): x0 = [[1],[2]], x1 = [[3],[4]] -> y = [[1,3],[2,4]];
  // G0 = [[1,2],[3,4]], G1 = [[10,20],[30,40]] -> dx0 = [[11],[33]], dx1 = [[22],[44]].
  {
    Variable x(pick(g, {tensor<double>({1, 2}).reshape({2, 1}),
                        tensor<double>({3, 4}).reshape({2, 1})}),
               true, "x");
    Variable y = ksuit::all_gather_grad(x, g, 1);
    expect_equal(y.value(), tensor<double>({1, 3, 2, 4}).reshape({2, 2}), g, "batch_dim 1: y");
    y.backward(pick(g, {tensor<double>({1, 2, 3, 4}).reshape({2, 2}),
                        tensor<double>({10, 20, 30, 40}).reshape({2, 2})}));
    expect_equal(x.grad(),
                 pick(g, {tensor<double>({11, 33}).reshape({2, 1}),
                          tensor<double>({22, 44}).reshape({2, 1})}),
                 g, "batch_dim 1: dx");
  }
}

void tc11(const Group& g) {
  const Tensor G = pick(g, {tensor<double>({1, 10}), tensor<double>({2, 20})});
  auto input = [&] {
    return Variable(pick(g, {tensor<double>({1, 2}), tensor<double>({2, 3})}), true, "x");
  };
  {
    Variable x = input();
    Variable y = ksuit::all_reduce_sum_grad(x, g);
    expect_equal(y.value(), tensor<double>({3, 5}), g, "sum_grad: y");
    y.backward(G);
    expect_equal(x.grad(), G, g, "sum_grad: dx (the identity, as under PyTorch 1.13)");
  }
  {
    Variable x = input();
    Variable y = ksuit::all_reduce_mean_grad(x, g);
    expect_equal(y.value(), tensor<double>({1.5, 2.5}), g, "mean_grad: y");
    y.backward(G);
    expect_equal(x.grad(), pick(g, {tensor<double>({0.5, 5}), tensor<double>({1, 10})}), g,
                 "mean_grad: dx = G / 2");
  }
  {
    Variable x = input();
    Variable y = ksuit::all_reduce_sum_nograd(x, g);
    expect_equal(y.value(), tensor<double>({3, 5}), g, "sum_nograd: y");
    expect(!y.requires_grad(), g, "sum_nograd: the result does not require grad");
    Variable m = ksuit::all_reduce_mean_nograd(x, g);
    expect_equal(m.value(), tensor<double>({1.5, 2.5}), g, "mean_nograd: y");
    expect(!m.requires_grad(), g, "mean_nograd: the result does not require grad");
  }
}

void nograd_gathers(const Group& g) {
  // Scalars x0 = 5, x1 = 7 -> [5,7]; any dtype (int64 here).
  Variable s = ksuit::all_gather_nograd(Variable(full({}, g.rank() == 0 ? 5 : 7, DType::Int64)), g);
  expect_equal(s.value(), tensor<int64_t>({5, 7}), g, "all_gather_nograd of scalars");
  Variable x(pick(g, {tensor<double>({0, 2, 4}), tensor<double>({1, 3, 5})}), true, "x");
  Variable y = ksuit::all_gather_nograd(x, g);
  expect_equal(y.value(), tensor<double>({0, 2, 4, 1, 3, 5}), g, "all_gather_nograd");
  expect(!y.requires_grad(), g, "all_gather_nograd: the result does not require grad");
  // The sampler dealt 0..5 round-robin: rank 0 has [0,2,4], rank 1 [1,3,5].
  expect_equal(ksuit::all_gather_nograd_clipped(x, g, 5).value(),
               tensor<double>({0, 1, 2, 3, 4}), g, "clipped to 5");
  expect_equal(ksuit::all_gather_nograd_clipped(x, g, 100).value(),
               tensor<double>({0, 1, 2, 3, 4, 5}), g, "clipped to 100 (keeps all)");
  expect(ksuit::all_gather_nograd_clipped(x, g, 0).value().shape() == Shape{0}, g,
         "clipped to 0 is empty");
  expect(!ksuit::all_gather_nograd_clipped(x, g, 5).requires_grad(), g,
         "clipped: the result does not require grad");
}

}  // namespace

DG_CASE("ksuit all_gather_grad(_autograd) and all_gather_grad_overwrite: hand-computed values at W = 2",
        "[ksuit][worked]", 2) {
  tc10(g);
}

DG_CASE("ksuit all_reduce_{sum,mean}_{grad,nograd}: hand-computed values at W = 2", "[ksuit][worked]", 2) {
  tc11(g);
}

DG_CASE("ksuit all_gather_nograd(_clipped) at W = 2", "[ksuit][worked]", 2) {
  nograd_gathers(g);
}

DG_CASE("ksuit all_gather_nograd_clipped undoes a round-robin sampler at any W", "[ksuit]", 1, 2,
        3, 4) {
  // A sampler deals samples 0..3W-1 round-robin: rank w gets [w, w+W, w+2W] as rows [3, 2]
  // (two columns, so whole rows move). The clipped gather restores 0..3W-1 and drops the
  // last (padding) sample.
  const int64_t w = g.size();
  std::vector<double> mine, all;
  for (int64_t l = 0; l < 3; ++l) {
    for (int c = 0; c < 2; ++c) mine.push_back(10.0 * (l * w + g.rank()) + c);
  }
  for (int64_t i = 0; i < 3 * w - 1; ++i) {
    for (int c = 0; c < 2; ++c) all.push_back(10.0 * i + c);
  }
  Variable y = ksuit::all_gather_nograd_clipped(Variable(from_vector<double>(mine, {3, 2})), g,
                                                3 * w - 1);
  expect_equal(y.value(), from_vector<double>(all, {3 * w - 1, 2}), g, "clipped gather");
}

DG_CASE("ksuit ops reject a negative max_length and an out-of-range batch_dim",
        "[ksuit][errors]", 1, 2, 3) {
  auto rejected = [&](auto&& call) {
    try {
      call();
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string negative = rejected([&] {
    ksuit::all_gather_nograd_clipped(Variable(zeros({2}, DType::Float64)), g, -1);
  });
  expect(negative.find("max_length") != std::string::npos, g,
         "negative max_length: got '" + negative + "'");
  const std::string dim = rejected([&] {
    ksuit::all_gather_grad(Variable(zeros({2, 2}, DType::Float64), true), g, 2);
  });
  expect(dim.find("batch_dim 2") != std::string::npos, g, "batch_dim 2: got '" + dim + "'");
  // Rejected before any data moved: the group still works.
  expect_equal(ksuit::all_gather_nograd(Variable(ones({1}, DType::Float64)), g).value(),
               ones({g.size()}, DType::Float64), g, "the group is usable after the errors");
}
