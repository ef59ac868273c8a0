// poptorch-experimental-addons' cross-replica ops (collectives/poptorch/poptorch.h): every op
// through the distributed gradcheck under the objective of its convention, at world sizes 1-4 and
// on a sub-group; hand-computed values at R = 2; R == 1; the argument checks.
#include <ferry/collectives/poptorch/poptorch.h>

#include <ferry/autograd/ops.h>
#include "compat_checks.h"
#include "tests/differentiable/spmd_gradcheck.h"

#include <string>

using namespace ferry;
using namespace compat;

namespace {

// Even, zero-size and 0-d inputs: every cross-replica op but the all-to-all takes any shape.
const Shape kShapes[] = {Shape{2}, Shape{0, 2}, Shape{}};

}  // namespace

DG_CASE("poptorch all_gather_cross_replica (P) and identical_grads_in (R): gradcheck",
        "[poptorch][cross_replica]", 1, 2, 3, 4) {
  for (const Group& group : compat::world_and_subgroup(g)) {
    const int64_t w = group.size();
    for (const Shape& shape : kShapes) {
      const Tensor x = rank_input(shape, g.rank());
      check(group, [&](const Variable& v) { return poptorch::all_gather_cross_replica(v, group); },
            x, w * shape_numel(shape), objective(GradcheckObjective::Sum));
      check(group,
            [&](const Variable& v) {
              return poptorch::all_gather_cross_replica_identical_grads_in(v, group);
            },
            x, w * shape_numel(shape), objective(GradcheckObjective::Replicated));
    }
  }
}

DG_CASE("poptorch all_reduce_cross_replica_sum, both placements: gradcheck",
        "[poptorch][cross_replica]", 1, 2, 3, 4) {
  for (const Group& group : compat::world_and_subgroup(g)) {
    const int64_t w = group.size();
    for (const Shape& shape : kShapes) {
      // Forward sum, backward identity: right for a once-counted replicated loss (R).
      check(group,
            [&](const Variable& v) { return poptorch::all_reduce_cross_replica_sum(v, group); },
            rank_input(shape, g.rank()), w * shape_numel(shape),
            objective(GradcheckObjective::Replicated));
      // Forward identity, backward sum: the input is one variable replicated on every rank.
      check(group,
            [&](const Variable& v) {
              return poptorch::all_reduce_cross_replica_sum(v, group, true);
            },
            rank_input(shape, 99), w * shape_numel(shape),
            objective(GradcheckObjective::Sum, /*replicated_inputs=*/true));
    }
  }
}

DG_CASE("poptorch all_to_all_single_cross_replica (P): gradcheck",
        "[poptorch][cross_replica]", 1, 2, 3, 4) {
  for (const Group& group : compat::world_and_subgroup(g)) {
    const int64_t w = group.size();
    for (const Shape& shape : {Shape{w, 1}, Shape{2 * w}, Shape{0, 2}}) {
      check(group,
            [&](const Variable& v) { return poptorch::all_to_all_single_cross_replica(v, group); },
            rank_input(shape, g.rank()), w * shape_numel(shape),
            objective(GradcheckObjective::Sum));
    }
  }
}

namespace {

void tc23(const Group& g) {
  // all_gather_cross_replica and identical_grads_in: y = [[1,2],[3,4]] on both.
  const Tensor G = pick(g, {tensor<double>({1, 2, 3, 4}).reshape({2, 2}),
                            tensor<double>({10, 20, 30, 40}).reshape({2, 2})});
  const Tensor gathered = tensor<double>({1, 2, 3, 4}).reshape({2, 2});
  for (bool identical : {false, true}) {
    Variable x(pick(g, {tensor<double>({1, 2}), tensor<double>({3, 4})}), true, "x");
    Variable y = identical ? poptorch::all_gather_cross_replica_identical_grads_in(x, g)
                           : poptorch::all_gather_cross_replica(x, g);
    const std::string name = identical ? "identical_grads_in" : "all_gather_cross_replica";
    expect_equal(y.value(), gathered, g, name + ": y");
    y.backward(G);
    expect_equal(x.grad(),
                 identical ? pick(g, {tensor<double>({1, 2}), tensor<double>({30, 40})})
                           : pick(g, {tensor<double>({11, 22}), tensor<double>({33, 44})}),
                 g, name + ": dx");
  }
  const Tensor G_reduce = pick(g, {tensor<double>({1, 1}), tensor<double>({2, 2})});
  {
    Variable x(pick(g, {tensor<double>({1, 2}), tensor<double>({3, 4})}), true, "x");
    Variable y = poptorch::all_reduce_cross_replica_sum(x, g);
    expect_equal(y.value(), tensor<double>({4, 6}), g, "all_reduce: y");
    y.backward(G_reduce);
    expect_equal(x.grad(), G_reduce, g, "all_reduce: dx");
  }
  {
    Variable x(pick(g, {tensor<double>({1, 2}), tensor<double>({3, 4})}), true, "x");
    Variable y = poptorch::all_reduce_cross_replica_sum(x, g, /*insert_in_grad_graph=*/true);
    expect_equal(y.value(), x.value(), g, "all_reduce insert_in_grad_graph: y");
    y.backward(G_reduce);
    expect_equal(x.grad(), tensor<double>({3, 3}), g, "all_reduce insert_in_grad_graph: dx");
  }
  {
    Variable x(pick(g, {tensor<double>({1, 2}).reshape({2, 1}),
                        tensor<double>({3, 4}).reshape({2, 1})}),
               true, "x");
    Variable y = poptorch::all_to_all_single_cross_replica(x, g);
    expect_equal(y.value(),
                 pick(g, {tensor<double>({1, 3}).reshape({2, 1}),
                          tensor<double>({2, 4}).reshape({2, 1})}),
                 g, "all_to_all: y");
    y.backward(pick(g, {tensor<double>({10, 20}).reshape({2, 1}),
                        tensor<double>({30, 40}).reshape({2, 1})}));
    expect_equal(x.grad(),
                 pick(g, {tensor<double>({10, 30}).reshape({2, 1}),
                          tensor<double>({20, 40}).reshape({2, 1})}),
                 g, "all_to_all: dx");
  }
}

void at_one_replica(const Group& g) {
  const Tensor G = tensor<double>({5, 6, 7, 8}).reshape({2, 2});
  for (bool identical : {false, true}) {
    Variable x(tensor<double>({1, 2, 3, 4}).reshape({2, 2}), true, "x");
    Variable y = identical ? poptorch::all_gather_cross_replica_identical_grads_in(x, g)
                           : poptorch::all_gather_cross_replica(x, g);
    expect_equal(y.value(), x.value().reshape({1, 2, 2}), g, "all_gather: y");
    y.backward(G.reshape({1, 2, 2}));
    expect_equal(x.grad(), G, g, "all_gather: dx");
  }
  for (bool insert : {false, true}) {
    Variable x(tensor<double>({1, 2, 3, 4}).reshape({2, 2}), true, "x");
    Variable y = poptorch::all_reduce_cross_replica_sum(x, g, insert);
    expect_equal(y.value(), x.value(), g, "all_reduce: y");
    y.backward(G);
    expect_equal(x.grad(), G, g, "all_reduce: dx");
  }
  Variable x(tensor<double>({1, 2, 3, 4}).reshape({2, 2}), true, "x");
  Variable y = poptorch::all_to_all_single_cross_replica(x, g);
  expect_equal(y.value(), x.value(), g, "all_to_all: y");
  y.backward(G);
  expect_equal(x.grad(), G, g, "all_to_all: dx");
}

}  // namespace

DG_CASE("poptorch cross-replica ops: hand-computed values at R = 2", "[poptorch][cross_replica][worked]", 2) {
  tc23(g);
}

DG_CASE("poptorch at R = 1: identities, the all_gather gives (1, *shape)",
        "[poptorch][cross_replica][worked]", 1) {
  at_one_replica(g);
}

DG_CASE("poptorch all_to_all_single_cross_replica rejects an indivisible leading axis and 0-d",
        "[poptorch][cross_replica][errors]", 2, 3) {
  auto message_of = [&](const Variable& x) -> std::string {
    try {
      poptorch::all_to_all_single_cross_replica(x, g);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  const int64_t rows = g.size() + 1;  // never a multiple of R >= 2
  const std::string indivisible = message_of(Variable(zeros({rows, 2}, DType::Float64)));
  for (const std::string& part :
       {std::string("all_to_all_single_cross_replica"), "rank " + std::to_string(g.rank()),
        "size " + std::to_string(rows), "R = " + std::to_string(g.size())}) {
    expect(indivisible.find(part) != std::string::npos, g,
           "the error should name '" + part + "', got: '" + indivisible + "'");
  }
  const std::string scalar = message_of(Variable(zeros({}, DType::Float64)));
  expect(scalar.find("0-d") != std::string::npos, g, "a 0-d input: got '" + scalar + "'");
  // Rejected before any data moved: the group still works.
  Variable y = poptorch::all_to_all_single_cross_replica(
      Variable(zeros({g.size(), 1}, DType::Float64)), g);
  expect(y.shape() == Shape({g.size(), 1}), g, "the group is usable after the errors");
}
