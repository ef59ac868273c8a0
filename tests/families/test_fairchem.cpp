// fairchem's graph-parallel setup and model-parallel regions: every region op
// through the distributed gradcheck under the objective of its adjoint convention, their worked
// numeric values, and the errors ferry raises where fairchem hangs or goes wrong. SPMD cases: on
// local worlds here, under mpiexec in tests/mpi (where the world has 2 or 3 ranks whatever sizes a
// case lists, so every body adapts to g.size()).
#include <ferry/autograd/ops.h>
#include <ferry/collectives/differentiable/distributed_gradcheck.h>
#include <ferry/collectives/fairchem/fairchem.h>
#include "tests/differentiable/spmd_gradcheck.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

using namespace ferry;
using namespace ferry::fairchem;
using dgtest::expect;
using dgtest::expect_passed;

namespace {

using RegionOp = std::function<Variable(const Variable& x, int64_t dim)>;

// What each rank feeds the op.
enum class Input {
  Replicated,  // the same full-size tensor on every rank (copy_to, scatter_to)
  PerRank,     // a full-size tensor of this rank's own values (reduce_from)
  Canonical,   // this rank's canonical part, its own values (gather_from, _sum_grad)
};

// A 2-D tensor with n entries along `dim` (0 or -1) and 2 along the other.
Shape along(int64_t dim, int64_t n) { return dim == 0 ? Shape{n, 2} : Shape{2, n}; }

Tensor values(const Shape& shape, uint64_t seed) {
  return uniform(shape, -1.0, 1.0, seed, DType::Float64);
}

DistributedGradcheckResult check_region(const Group& g, const RegionOp& op, Input input,
                                        GradcheckObjective objective, int64_t n, int64_t dim) {
  const int me = g.rank();
  const int64_t local = input == Input::Canonical ? canonical_partition(n, g.size())[me] : n;
  const Tensor x = values(along(dim, local), input == Input::Replicated ? 7 : 100 + me);
  DistributedGradcheckOptions options;
  options.objective = objective;
  options.replicated_inputs = input == Input::Replicated;
  auto fn = [&](const std::vector<Variable>& in) {
    return std::vector<Variable>{op(in[0], dim)};
  };
  return distributed_gradcheck(fn, {x}, g, options);
}

// Even (one entry per rank), uneven (one rank has two; for W = 1 simply two) and empty on every
// rank, along dim 0 and dim -1 of a 2-D tensor.
void check_all_shapes(const Group& g, const std::string& what, const RegionOp& op, Input input,
                      GradcheckObjective objective) {
  const int w = g.size();
  for (int64_t n : {int64_t{w}, int64_t{w} + 1, int64_t{0}}) {
    for (int64_t dim : {int64_t{0}, int64_t{-1}}) {
      DistributedGradcheckResult r = check_region(g, op, input, objective, n, dim);
      r.message = what + " (n " + std::to_string(n) + ", dim " + std::to_string(dim) + "): " +
                  r.message;
      // Replicated inputs are probed and compared on every rank.
      const int64_t copies = input == Input::Canonical ? 1 : w;
      expect_passed(r, copies * 2 * n, g);
    }
  }
}

// Every region op on `g`, or (on_default) the module functions' forms without a group, which
// run on the default layout's GP group: then `g` must be that group.
void check_every_region(const Group& g, bool on_default = false) {
  using O = GradcheckObjective;
  check_all_shapes(g, "copy_to", [&](const Variable& x, int64_t) {
    return on_default ? copy_to_model_parallel_region(x) : copy_to_model_parallel_region(x, g);
  }, Input::Replicated, O::Sum);
  check_all_shapes(g, "reduce_from", [&](const Variable& x, int64_t) {
    return on_default ? reduce_from_model_parallel_region(x)
                      : reduce_from_model_parallel_region(x, g);
  }, Input::PerRank, O::Replicated);
  check_all_shapes(g, "scatter_to", [&](const Variable& x, int64_t dim) {
    return on_default ? scatter_to_model_parallel_region(x, dim)
                      : scatter_to_model_parallel_region(x, g, dim);
  }, Input::Replicated, O::Sum);
  check_all_shapes(g, "gather_from", [&](const Variable& x, int64_t dim) {
    return on_default ? gather_from_model_parallel_region(x, dim)
                      : gather_from_model_parallel_region(x, g, dim);
  }, Input::Canonical, O::Replicated);
  check_all_shapes(g, "gather_from_sum_grad", [&](const Variable& x, int64_t dim) {
    return on_default ? gather_from_model_parallel_region_sum_grad(x, dim)
                      : gather_from_model_parallel_region_sum_grad(x, g, dim);
  }, Input::Canonical, O::Sum);
}

Tensor t64(std::vector<double> v) { return from_vector<double>(v); }

void expect_equal(const Tensor& got, const Tensor& want, const Group& g, const std::string& what) {
  expect(got.defined() && allclose(got, want, 1e-12, 1e-12), g,
         what + " is " + (got.defined() ? got.to_string() : "undefined") + ", expected " +
             want.to_string());
}

template <class F>
bool throws_invalid(F&& f, const std::string& needle = "") {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return needle.empty() || std::string(e.what()).find(needle) != std::string::npos;
  }
  return false;
}

}  // namespace

// ---- gradchecks ----

DG_CASE("model-parallel regions pass the gradcheck of their convention",
        "[model_parallel][gradcheck]", 1, 2, 3, 4) {
  // The R ops with a replicated input and per-rank outputs (copy_to, scatter_to) are checked
  // with the copies perturbed together and the per-rank outputs summed (each rank's downstream
  // computation is its own); the R ops with a replicated output (reduce_from, gather_from) with
  // the once-counted loss; the P op (_sum_grad) with the sum of per-rank losses.
  check_every_region(g);
}

DG_CASE("f/g and scatter/gather pairs: the replicated loss of a replicated input",
        "[model_parallel][gradcheck]", 1, 2, 3, 4) {
  using O = GradcheckObjective;
  check_all_shapes(g, "scatter_to -> gather_from", [&](const Variable& x, int64_t dim) {
    return gather_from_model_parallel_region(scatter_to_model_parallel_region(x, g, dim), g,
                                             dim);
  }, Input::Replicated, O::Replicated);
  check_all_shapes(g, "copy_to -> reduce_from", [&](const Variable& x, int64_t) {
    return reduce_from_model_parallel_region(copy_to_model_parallel_region(x, g), g);
  }, Input::Replicated, O::Replicated);
}

DG_CASE("the gradchecks are not vacuous: each convention fails the other objective",
        "[model_parallel][gradcheck]", 2, 3) {
  using O = GradcheckObjective;
  const int64_t n = g.size() + 1;
  auto gather_r = [&](const Variable& x, int64_t dim) {
    return gather_from_model_parallel_region(x, g, dim);
  };
  auto gather_p = [&](const Variable& x, int64_t dim) {
    return gather_from_model_parallel_region_sum_grad(x, g, dim);
  };
  auto scatter = [&](const Variable& x, int64_t dim) {
    return scatter_to_model_parallel_region(x, g, dim);
  };
  for (int64_t dim : {int64_t{0}, int64_t{-1}}) {
    auto r = check_region(g, gather_r, Input::Canonical, O::Sum, n, dim);
    expect(!r.ok, g, "gather_from (R) passed the sum-of-per-rank-losses objective: " + r.message);
    r = check_region(g, gather_p, Input::Canonical, O::Replicated, n, dim);
    expect(!r.ok, g, "gather_from_sum_grad (P) passed the replicated objective: " + r.message);
    r = check_region(g, scatter, Input::Replicated, O::Replicated, n, dim);
    expect(!r.ok, g, "scatter_to passed the replicated objective: " + r.message);
  }
}

DG_CASE("regions on graph-parallel sub-groups (world 4, gp 2: two GP groups)",
        "[model_parallel][graph_parallel][gradcheck]", 2, 4) {
  // Under mpiexec -n 3 a GP size of 2 does not divide the world: use one group of 3 there.
  const int gp_size = g.size() % 2 == 0 ? 2 : g.size();
  GraphParallel gp = GraphParallel::setup(g, gp_size);
  expect(gp.gp_size() == gp_size && gp.dp_size() == g.size() / gp_size, g, "GP/DP sizes");
  check_every_region(gp.gp_group());

  // The GraphParallel overloads use the GP group.
  Variable x(t64({1.0, 2.0}), true, "x");
  Variable y = scale_backward_grad(gather_from_model_parallel_region(
                                       scatter_to_model_parallel_region(x, gp, 0), gp, 0),
                                   gp);
  y.backward(t64({3.0, 4.0}));
  expect_equal(x.grad(), t64({3.0 * gp_size, 4.0 * gp_size}), g,
               "scatter -> gather -> scale_backward_grad gradient");
  gp.cleanup();
}

DG_CASE("scale_backward_grad: identity forward, gradient times the GP size",
        "[model_parallel]", 1, 2, 3, 4) {
  // Not an adjoint (a deliberate rescale compensating DDP's mean), so exact values, not a
  // gradcheck. G = [3, 4] -> [3W, 4W]; a 2-D gradient along the way.
  Variable x(t64({1.0, 2.0}), true, "x");
  Variable y = scale_backward_grad(x, g);
  expect_equal(y.value(), t64({1.0, 2.0}), g, "forward");
  y.backward(t64({3.0, 4.0}));
  const double w = g.size();
  expect_equal(x.grad(), t64({3.0 * w, 4.0 * w}), g, "dx");

  Variable m(zeros({2, 0}, DType::Float64), true, "m");
  scale_backward_grad(m, g).backward(zeros({2, 0}, DType::Float64));
  expect(m.grad().defined() && m.grad().shape() == Shape({2, 0}), g, "empty gradient");
}

// ---- hand-computed values, one case per region op ----

DG_CASE("graph-parallel layout, clamp and strict policies", "[model_parallel][graph_parallel]",
        1, 2, 3, 4) {
  const int w = g.size();
  const int r = g.rank();
  if (w == 4) {
    GraphParallel gp = GraphParallel::setup(g, 2, GpSizePolicy::Strict);
    const std::vector<std::vector<int>> gp_members = {{0, 1}, {0, 1}, {2, 3}, {2, 3}};
    const std::vector<std::vector<int>> dp_members = {{0, 2}, {1, 3}, {0, 2}, {1, 3}};
    const int gp_rank[] = {0, 1, 0, 1};
    const int dp_rank[] = {0, 0, 1, 1};
    expect(gp.gp_group().members() == gp_members[r], g, "GP group members");
    expect(gp.dp_group().members() == dp_members[r], g, "DP group members");
    expect(gp.gp_rank() == gp_rank[r] && gp.dp_rank() == dp_rank[r], g, "(gp_rank, dp_rank)");
    expect(gp.gp_size() == 2 && gp.dp_size() == 2, g, "gp/dp world sizes");
  }
  // gp 8: setup_gp clamps to the world (one GP group, DP groups of one rank each) ...
  {
    GraphParallel gp = GraphParallel::setup(g, 8, GpSizePolicy::Clamp);
    expect(gp.initialized() && gp.gp_size() == w && gp.gp_rank() == r, g, "clamped GP group");
    expect(gp.dp_size() == 1 && gp.dp_rank() == 0, g, "clamped DP groups");
    expect(gp.dp_group().members() == std::vector<int>{r}, g, "clamped DP group members");
  }
  // ... setup_graph_parallel_groups refuses it.
  expect(throws_invalid([&] { GraphParallel::setup(g, 8, GpSizePolicy::Strict); },
                        "exceeds the world size"),
         g, "strict setup with gp 8 > W did not raise InvalidArgument");
}

TEST_CASE("canonical partition, pad and trim", "[model_parallel][partition]") {
  CHECK(canonical_partition(5, 4) == std::vector<int64_t>{2, 1, 1, 1});
  CHECK(canonical_partition(3, 2) == std::vector<int64_t>{2, 1});
  CHECK(canonical_partition(1, 3) == std::vector<int64_t>{1, 0, 0});
  CHECK(canonical_partition(0, 2) == std::vector<int64_t>{0, 0});
  CHECK(partition_start(5, 4, 0) == 0);
  CHECK(partition_start(5, 4, 1) == 2);
  CHECK(partition_start(5, 4, 3) == 4);

  const Tensor t = tensor<float>({1, 2, 3});
  // fairchem leaves the 4th entry undefined; ferry pads with zeros.
  CHECK(equal(pad_tensor_to_multiple(t, 2, 0), tensor<float>({1, 2, 3, 0})));
  CHECK(equal(pad_tensor(t, -1, 5), tensor<float>({1, 2, 3, 0, 0})));
  const Tensor same = pad_tensor(t, 0, 3);  // nothing to pad: t itself
  CHECK(same.shares_storage_with(t));
  CHECK(same.raw_data() == t.raw_data());
  const Tensor m = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(equal(pad_tensor_to_multiple(m, 2, -1),
              from_vector<float>({1, 2, 3, 0, 4, 5, 6, 0}, {2, 4})));

  TrimmedTensor trimmed = trim_tensor_to_multiple(t, 2, {2, 1});
  CHECK(equal(trimmed.tensor, tensor<float>({1, 2})));
  CHECK(trimmed.sizes == std::vector<int64_t>{2, 0});
  trimmed = trim_tensor_to_multiple(m, 2, {}, 1);
  CHECK(equal(trimmed.tensor, from_vector<float>({1, 2, 4, 5}, {2, 2})));
  CHECK(trimmed.sizes.empty());
  // Nothing to trim: t itself, sizes unchanged.
  trimmed = trim_tensor_to_multiple(m, 3, {1, 1, 1}, -1);
  CHECK(trimmed.tensor.raw_data() == m.raw_data());
  CHECK(trimmed.sizes == std::vector<int64_t>{1, 1, 1});

  CHECK_THROWS_AS(pad_tensor(t, 1, 4), InvalidArgument);
  CHECK_THROWS_AS(pad_tensor(t, 0, 2), InvalidArgument);
  CHECK_THROWS_AS(trim_tensor_to_multiple(m, 2, {}, -3), InvalidArgument);
  CHECK_THROWS_AS(canonical_partition(3, 0), InvalidArgument);
  CHECK_THROWS_AS(pad_tensor(full({}, 1.0), 0, 1), InvalidArgument);
}

DG_CASE("scatter_to gives every rank the full gradient, even and uneven", "[model_parallel]", 2) {
  const int r = g.rank();
  {  // even
    Variable x(t64({2, 3, 5, 7}), true, "x");
    Variable y = scatter_to_model_parallel_region(x, g, 0);
    expect_equal(y.value(), r == 0 ? t64({2, 3}) : t64({5, 7}), g, "even y");
    y.backward(r == 0 ? t64({1, 10}) : t64({100, 1000}));
    expect_equal(x.grad(), t64({1, 10, 100, 1000}), g, "even dx");
  }
  {  // uneven
    Variable x(t64({0, 1, 2}), true, "x");
    Variable y = scatter_to_model_parallel_region(x, g, 0);
    expect_equal(y.value(), r == 0 ? t64({0, 1}) : t64({2}), g, "uneven y");
    y.backward(r == 0 ? t64({1, 2}) : t64({3}));
    expect_equal(x.grad(), t64({1, 2, 3}), g, "uneven dx");
  }
}

DG_CASE("gather_from keeps my slice of my gradient, _sum_grad sums them",
        "[model_parallel]", 2) {
  const int r = g.rank();
  const Tensor x_values = r == 0 ? t64({1, 2}) : t64({3});
  const Tensor grad = r == 0 ? t64({10, 20, 30}) : t64({40, 50, 60});
  Variable x(x_values, true, "x");
  Variable y = gather_from_model_parallel_region(x, g, 0);
  expect_equal(y.value(), t64({1, 2, 3}), g, "gather_from y");
  y.backward(grad);
  expect_equal(x.grad(), r == 0 ? t64({10, 20}) : t64({60}), g, "gather_from dx");

  Variable xs(x_values, true, "xs");
  Variable ys = gather_from_model_parallel_region_sum_grad(xs, g, 0);
  expect_equal(ys.value(), t64({1, 2, 3}), g, "sum_grad y");
  ys.backward(grad);
  expect_equal(xs.grad(), r == 0 ? t64({50, 70}) : t64({90}), g, "sum_grad dx");
}

DG_CASE("non-canonical sizes raise a clear error on every rank, the group stays usable",
        "[model_parallel][errors]", 2) {
  const int r = g.rank();
  for (bool sum_grad : {false, true}) {
    Variable x(r == 0 ? t64({1}) : t64({3, 4, 5}), true, "x");
    const bool raised = throws_invalid([&] {
      sum_grad ? gather_from_model_parallel_region_sum_grad(x, g, 0)
               : gather_from_model_parallel_region(x, g, 0);
    }, "are [1, 3], expected the canonical partition [2, 2]");
    expect(raised, g, "non-canonical sizes (1, 3) did not raise the expected error");
  }
  // Ranks disagreeing about the other dims: also refused on every rank.
  Variable m(zeros({1, r == 0 ? 2 : 3}, DType::Float64), true, "m");
  expect(throws_invalid([&] { gather_from_model_parallel_region(m, g, 0); }, "disagree"),
         g, "different trailing dims did not raise");
  // Nothing was left half done: the next collective on the group works.
  Variable x(r == 0 ? t64({1, 2}) : t64({3}), true, "x");
  expect_equal(gather_from_model_parallel_region(x, g, 0).value(), t64({1, 2, 3}), g,
               "gather after the error");
}

DG_CASE("reduce_from (out of place), copy_to, scale_backward_grad", "[model_parallel]", 2) {
  const int r = g.rank();
  {
    Variable x(r == 0 ? t64({1, 2}) : t64({3, 4}), true, "x");
    Variable y = reduce_from_model_parallel_region(x, g);
    expect_equal(y.value(), t64({4, 6}), g, "reduce_from y");
    expect_equal(x.value(), r == 0 ? t64({1, 2}) : t64({3, 4}), g, "reduce_from's input");
    y.backward(r == 0 ? t64({1, 1}) : t64({2, 2}));
    expect_equal(x.grad(), r == 0 ? t64({1, 1}) : t64({2, 2}), g, "reduce_from dx");
  }
  {
    Variable x(t64({5, 6}), true, "x");
    Variable y = copy_to_model_parallel_region(x, g);
    expect_equal(y.value(), t64({5, 6}), g, "copy_to y");
    y.backward(r == 0 ? t64({1, 2}) : t64({10, 20}));
    expect_equal(x.grad(), t64({11, 22}), g, "copy_to dx");
  }
  {
    Variable x(t64({5, 6}), true, "x");
    scale_backward_grad(x, g).backward(t64({3, 4}));
    expect_equal(x.grad(), t64({6, 8}), g, "scale_backward_grad dx");
  }
}

DG_CASE("scatter -> local energy -> reduce_from gives dE/dx = [7, 5, 11] on both ranks",
        "[model_parallel]", 2) {
  const int r = g.rank();
  Variable x(t64({2, 3, 5}), true, "x");
  Variable part = scatter_to_model_parallel_region(x, g, 0);  // r0 [2, 3], r1 [5]
  Variable prod = exp(sum(log(part)));                            // inputs are positive
  Variable e = r == 0 ? sum(part + prod) : sum(part + prod * prod);
  Variable energy = reduce_from_model_parallel_region(e, g);
  expect(std::abs(energy.value().item() - 47.0) < 1e-9, g,
         "E is " + energy.value().to_string() + ", expected 47");
  energy.backward();
  expect(allclose(x.grad(), t64({7, 5, 11}), 1e-12, 1e-9), g,
         "dE/dx is " + x.grad().to_string() + ", expected [7, 5, 11]");
}

// ---- errors ----

DG_CASE("setup errors: W % gp != 0, re-initialisation, getters when not initialized",
        "[model_parallel][graph_parallel][errors]", 1, 2, 3, 4) {
  const int w = g.size();
  if (w >= 3) {  // W - 1 never divides W from 3 on
    expect(throws_invalid([&] { GraphParallel::setup(g, w - 1); }, "is not divisible"), g,
           "a GP size that does not divide W was accepted");
  }
  expect(throws_invalid([&] { GraphParallel::setup(g, 0); }, ">= 1"), g, "gp size 0 accepted");

  GraphParallel gp = GraphParallel::setup(g, 1);
  expect(throws_invalid([&] { GraphParallel::setup(g, 1); }, "already initialized"), g,
         "a second setup over the same world was accepted");
  gp.cleanup();
  expect(!gp.initialized(), g, "initialized() after cleanup");
  expect(throws_invalid([&] { gp.gp_rank(); }, "not initialized"), g, "gp_rank after cleanup");
  expect(throws_invalid([&] { gp.dp_size(); }, "not initialized"), g, "dp_size after cleanup");
  expect(throws_invalid([&] { gp.gp_group(); }, "not initialized"), g, "gp_group after cleanup");
  expect(throws_invalid([&] { gp.cleanup(); }, "not initialized"), g, "cleanup twice");
  Variable x(t64({1}), true, "x");
  expect(throws_invalid([&] { copy_to_model_parallel_region(x, gp); }, "not initialized"), g,
         "a region op on a cleaned-up GraphParallel");
  expect(throws_invalid([&] { GraphParallel().gp_size(); }, "not initialized"), g,
         "gp_size before setup");

  // After cleanup, and after an initialized object went out of scope, setup works again.
  { GraphParallel again = GraphParallel::setup(g, w); }
  GraphParallel moved = GraphParallel::setup(g, w);
  GraphParallel target = std::move(moved);  // the registration moves with it
  expect(!moved.initialized() && target.initialized(), g, "move");
  expect(throws_invalid([&] { GraphParallel::setup(g, w); }, "already initialized"), g,
         "setup while a moved-to object is initialized");
}

// Ends the default layout however a case ends: under mpiexec it is the process's, and the next
// case in the same process must find none.
struct DefaultLayoutGuard {
  ~DefaultLayoutGuard() {
    if (initialized()) cleanup_gp();
  }
};

DG_CASE("gp_utils module functions: setup_gp, the getters, pad / trim and the regions on the "
        "default layout", "[model_parallel][graph_parallel][gp_utils]", 1, 2, 3, 4) {
  const int w = g.size();
  const int r = g.rank();
  DefaultLayoutGuard guard;
  // Before setup_gp everything but initialized() and setup refuses (fairchem answers for the
  // world group).
  expect(!initialized(), g, "initialized() before setup_gp");
  expect(throws_invalid([&] { get_gp_rank(); }, "not initialized"), g, "get_gp_rank before setup");
  expect(throws_invalid([&] { cleanup_gp(); }, "not initialized"), g, "cleanup_gp before setup");
  expect(throws_invalid([&] { pad_tensor(t64({1, 2, 3})); }, "pad_tensor"), g,
         "pad_tensor without a target before setup");
  expect(throws_invalid([&] { trim_tensor(t64({1, 2, 3})); }, "trim_tensor"), g,
         "trim_tensor before setup");
  expect(throws_invalid([&] { scale_backward_grad(Variable(t64({1}), true)); },
                        "not initialized"),
         g, "a region before setup");
  expect(throws_invalid([&] { setup_graph_parallel_groups(g, w + 1); }, "exceeds the world"), g,
         "setup_graph_parallel_groups with a GP size above W");
  expect(!initialized(), g, "initialized() after a refused setup");

  // A GP size of 2 where it divides W, else one GP group of all W ranks (clamped from 8).
  const int gp = w % 2 == 0 ? 2 : w;
  setup_gp(g, w % 2 == 0 ? 2 : 8);
  expect(initialized(), g, "initialized() after setup_gp");
  expect(get_gp_world_size() == gp && get_dp_world_size() == w / gp, g, "GP / DP world sizes");
  expect(get_gp_rank() == r % gp && get_dp_rank() == r / gp, g, "GP / DP ranks");
  std::vector<int> row, column;  // world ranks of my GP row and my DP column
  for (int k = 0; k < w; ++k) {
    if (k / gp == r / gp) row.push_back(g.world_rank(k));
    if (k % gp == r % gp) column.push_back(g.world_rank(k));
  }
  expect(get_gp_group().members() == row, g, "get_gp_group's members");
  expect(get_dp_group().members() == column, g, "get_dp_group's members");
  expect(throws_invalid([&] { setup_gp(g, gp); }, "already initialized"), g, "setup_gp twice");

  // pad_tensor(tensor, dim=-1, target_size=None) and trim_tensor(tensor, sizes=None, dim=0),
  // dividing by the GP size: n = 2 gp - 1 entries pad to 2 gp (gp 1: nothing to pad).
  const int64_t n = 2 * gp - 1;
  const Tensor t = arange(1.0, n + 1.0, 1.0, DType::Float64);
  const int64_t padded_n = gp == 1 ? n : 2 * gp;
  std::vector<double> padded(static_cast<size_t>(padded_n), 0.0);
  for (int64_t i = 0; i < n; ++i) padded[static_cast<size_t>(i)] = i + 1.0;
  expect_equal(pad_tensor(t), from_vector<double>(padded), g, "pad_tensor(t)");
  expect(pad_tensor(t, 0, n + 2).shape() == Shape{n + 2}, g, "pad_tensor(t, 0, n + 2)");
  const int64_t extra = n % gp;
  const TrimmedTensor trimmed = trim_tensor(t, {1, n - 1}, 0);
  expect(trimmed.tensor.shape() == Shape{n - extra}, g, "trim_tensor's tensor");
  expect(trimmed.sizes == std::vector<int64_t>{1, n - 1 - extra}, g, "trim_tensor's sizes");

  // The regions without a group run on the default layout's GP group.
  check_every_region(get_gp_group(), /*on_default=*/true);
  Variable x(t64({1.0, 2.0}), true, "x");
  scale_backward_grad(x).backward(t64({3.0, 4.0}));
  expect_equal(x.grad(), t64({3.0 * gp, 4.0 * gp}), g, "scale_backward_grad's gradient");

  cleanup_gp();
  expect(!initialized(), g, "initialized() after cleanup_gp");
  expect(throws_invalid([&] { get_dp_world_size(); }, "not initialized"), g,
         "get_dp_world_size after cleanup_gp");
  setup_graph_parallel_groups(g, 1);
  expect(get_gp_world_size() == 1 && get_dp_world_size() == w && get_dp_rank() == r, g,
         "setup_graph_parallel_groups after cleanup_gp");
  cleanup_gp();
}

DG_CASE("region op argument errors: bad dim, dtype, 0-d", "[model_parallel][errors]", 1, 2, 3) {
  // All raised on every rank before any communication, so the group stays usable.
  Variable m(zeros({2, 3}, DType::Float64), true, "m");
  expect(throws_invalid([&] { scatter_to_model_parallel_region(m, g, 2); }, "out of range"), g,
         "scatter dim 2 on a 2-D tensor");
  expect(throws_invalid([&] { gather_from_model_parallel_region(m, g, -3); }, "out of range"),
         g, "gather dim -3 on a 2-D tensor");
  expect(throws_invalid([&] { gather_from_model_parallel_region_sum_grad(
                                  Variable(full({}, 1.0, DType::Float64)), g, 0); },
                        "0-d"),
         g, "gather of a 0-d tensor");
  expect(throws_invalid([&] { reduce_from_model_parallel_region(Variable(ones({2}, DType::Int32)),
                                                                g); }),
         g, "reduce_from of int32");
  Variable y = gather_from_model_parallel_region(
      scatter_to_model_parallel_region(Variable(t64({1, 2, 3})), g, -1), g, -1);
  expect_equal(y.value(), t64({1, 2, 3}), g, "scatter -> gather after the errors");
}

DG_CASE("gather_with_padding: any per-rank sizes, along dim 0 and dim -1", "[model_parallel]",
        1, 2, 3, 4) {
  // Rank k holds 2k + 1 columns (or rows) of values 100 k + i; non-canonical on purpose.
  auto block = [](int k, int64_t dim) {
    const int64_t n = 2 * k + 1;
    Tensor t = arange(0.0, 2.0 * n, 1.0, DType::Float64).reshape(dim == 0 ? Shape{n, 2} : Shape{2, n});
    Tensor shifted = t.clone();
    for (int64_t i = 0; i < t.numel(); ++i) shifted.set_flat(i, t.get_flat(i) + 100.0 * k);
    return shifted;
  };
  for (int64_t dim : {int64_t{0}, int64_t{-1}}) {
    std::vector<Tensor> all;
    for (int k = 0; k < g.size(); ++k) all.push_back(block(k, dim));
    const Tensor want = cat(all, dim == 0 ? 0 : 1);
    const Tensor got = gather_with_padding(block(g.rank(), dim), g, dim);
    expect(equal(got, want), g,
           "dim " + std::to_string(dim) + ": got " + got.to_string() + ", want " + want.to_string());
  }
  // Other dims that differ are refused on every rank (at W >= 2), before the data moves.
  if (g.size() >= 2) {
    bool refused = false;
    try {
      gather_with_padding(zeros({1, g.rank() == 0 ? 2 : 3}, DType::Float64), g, 0);
    } catch (const InvalidArgument&) {
      refused = true;
    }
    expect(refused, g, "other dims that differ were not refused");
  }
}
