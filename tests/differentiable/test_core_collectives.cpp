// The core differentiable collectives (collectives/differentiable/differentiable.h): every op
// through the distributed gradcheck at world sizes 1-4 with even, uneven and zero-size blocks,
// under the objective of its convention; exact values for the tie rule of max/min and for
// the contrast of the two all_reduce adjoints; and the argument checks. SPMD cases: local worlds here, mpiexec / UCX in
// tests/mpi and tests/ucx.
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/differentiable/differentiable.h>
#include <ferry/collectives/differentiable/distributed_gradcheck.h>
#include <ferry/collectives/run_ranks.h>
#include "spmd_gradcheck.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <numeric>
#include <string>
#include <vector>

using namespace ferry;
using dgtest::check;
using dgtest::expect;
using dgtest::expect_passed;
using dgtest::objective;

namespace {

Tensor rank_input(const Shape& shape, int rank) {
  return uniform(shape, -1.0, 1.0, 300 + rank, DType::Float64);
}

int64_t total_rows(const Group& g, const std::function<int64_t(int)>& rows_of) {
  int64_t total = 0;
  for (int k = 0; k < g.size(); ++k) total += rows_of(k);
  return total;
}

const Shape kShapes[] = {Shape{3}, Shape{2, 2}, Shape{0, 2}, Shape{}};

}  // namespace

DG_CASE("all_reduce sum / avg / max / min: the P adjoint under the sum objective",
        "[core][all_reduce]", 1, 2, 3, 4) {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
    for (const Shape& shape : kShapes) {
      check(g, [&](const Variable& x) { return all_reduce(x, g, op); },
            rank_input(shape, g.rank()), g.size() * shape_numel(shape));
    }
  }
}

DG_CASE("all_reduce sum / avg / max / min: the R adjoint under the replicated objective",
        "[core][all_reduce]", 1, 2, 3, 4) {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
    for (const Shape& shape : kShapes) {
      check(g, [&](const Variable& x) { return all_reduce(x, g, op, Adjoint::Replicated); },
            rank_input(shape, g.rank()), g.size() * shape_numel(shape),
            objective(GradcheckObjective::Replicated));
    }
  }
}

DG_CASE("all_reduce max / min: a tie sends the whole gradient to the lowest rank holding it",
        "[core][all_reduce]", 1, 2, 3, 4) {
  // Element 0 ties on every rank; element 1's max is on the last rank and its min on rank 0;
  // element 2 ties between the two highest ranks at the max (and everyone else is below).
  const int me = g.rank();
  const int last = g.size() - 1;
  const double third = me >= last - 1 ? 9.0 : 1.0 * me;
  Variable x(from_vector<double>({7.0, 1.0 * me, third}), true, "x");
  for (Adjoint a : {Adjoint::PerRank, Adjoint::Replicated}) {
    for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) {
      x.zero_grad();
      Variable y = all_reduce(x, g, op, a);
      // G_r = [1, 10, 100] * (r + 1). P: the winner gets sum_r G_r = [1, 10, 100] * W(W+1)/2;
      // R: the winner gets its own G.
      const double s = a == Adjoint::PerRank ? g.size() * (g.size() + 1) / 2.0 : me + 1.0;
      y.backward(from_vector<double>({1.0 * (me + 1), 10.0 * (me + 1), 100.0 * (me + 1)}));
      const int winner1 = op == ReduceOp::Max ? last : 0;
      const int winner2 = op == ReduceOp::Max ? std::max(0, last - 1) : 0;
      const Tensor expected = from_vector<double>(
          {me == 0 ? s : 0.0, me == winner1 ? 10 * s : 0.0, me == winner2 ? 100 * s : 0.0});
      expect(equal(x.grad(), expected), g,
             std::string(reduce_op_name(op)) + " (" + adjoint_name(a) + "): x.grad() is " +
                 x.grad().to_string() + ", expected " + expected.to_string());
    }
  }
}

DG_CASE("all_gather and all_gather_v: P under the sum objective, R under the replicated one",
        "[core][all_gather]", 1, 2, 3, 4) {
  for (int64_t rows : {0, 1, 3}) {
    const Tensor x = rank_input({rows, 2}, g.rank());
    for (Adjoint a : {Adjoint::PerRank, Adjoint::Replicated}) {
      const auto o = a == Adjoint::PerRank ? GradcheckObjective::Sum : GradcheckObjective::Replicated;
      check(g, [&](const Variable& v) { return all_gather(v, g, a); }, x, g.size() * rows * 2,
            objective(o));
      check(g, [&](const Variable& v) { return all_gather_v(v, g, a); }, x, g.size() * rows * 2,
            objective(o));
    }
  }
  // Uneven: rank k has k % 3 rows (zero rows on rank 0).
  auto rows_of = [](int k) { return int64_t{k % 3}; };
  const Tensor x = rank_input({rows_of(g.rank()), 2}, g.rank());
  check(g, [&](const Variable& v) { return all_gather_v(v, g); }, x, 2 * total_rows(g, rows_of));
  check(g, [&](const Variable& v) { return all_gather_v(v, g, Adjoint::Replicated); }, x,
        2 * total_rows(g, rows_of), objective(GradcheckObjective::Replicated));
}

DG_CASE("reduce_scatter and reduce_scatter_v: the P adjoint (an all_gather)",
        "[core][reduce_scatter]", 1, 2, 3, 4) {
  for (int64_t rows : {0, 1, 2}) {
    check(g, [&](const Variable& v) { return reduce_scatter(v, g); },
          rank_input({rows * g.size(), 2}, g.rank()), g.size() * g.size() * rows * 2);
  }
  for (const std::vector<int64_t>& pattern :
       {std::vector<int64_t>{2, 0, 1, 3}, std::vector<int64_t>{0, 0, 0, 0}}) {
    const std::vector<int64_t> sizes(pattern.begin(), pattern.begin() + g.size());
    const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
    check(g, [&](const Variable& v) { return reduce_scatter_v(v, sizes, g); },
          rank_input({total, 2}, g.rank()), g.size() * total * 2);
  }
}

DG_CASE("all_to_all_single, equal and with splits: the P adjoint (splits swapped)",
        "[core][all_to_all]", 1, 2, 3, 4) {
  for (int64_t rows : {0, 1, 2}) {
    check(g, [&](const Variable& v) { return all_to_all_single(v, g); },
          rank_input({rows * g.size(), 2}, g.rank()), g.size() * g.size() * rows * 2);
  }
  // Rank me sends (2 me + j) % 3 rows to rank j, so it receives (2 k + me) % 3 rows from rank
  // k: the two lists differ, so a backward that forgot to swap them would be caught.
  const int me = g.rank();
  std::vector<int64_t> in_splits, out_splits;
  for (int j = 0; j < g.size(); ++j) {
    in_splits.push_back((2 * me + j) % 3);
    out_splits.push_back((2 * j + me) % 3);
  }
  const int64_t sent = std::accumulate(in_splits.begin(), in_splits.end(), int64_t{0});
  int64_t elements = 0;
  for (int k = 0; k < g.size(); ++k) {
    for (int j = 0; j < g.size(); ++j) elements += 3 * ((2 * k + j) % 3);
  }
  check(g, [&](const Variable& v) { return all_to_all_single(v, out_splits, in_splits, g); },
        rank_input({sent, 3}, g.rank()), elements);
}

DG_CASE("broadcast: P under the sum objective, R under the replicated one", "[core][broadcast]",
        1, 2, 3, 4) {
  for (const Shape& shape : kShapes) {
    for (int root : {0, g.size() - 1}) {
      const Tensor x = rank_input(shape, g.rank());
      check(g, [&](const Variable& v) { return broadcast(v, root, g); }, x,
            g.size() * shape_numel(shape));
      check(g, [&](const Variable& v) { return broadcast(v, root, g, Adjoint::Replicated); }, x,
            g.size() * shape_numel(shape), objective(GradcheckObjective::Replicated));
    }
  }
}

DG_CASE("scatter and gather: each the adjoint of the other", "[core][scatter][gather]", 1, 2, 3,
        4) {
  for (int64_t rows : {0, 2}) {
    for (int root : {0, g.size() - 1}) {
      // scatter: root's x is [W*rows, 2]; elsewhere x is the [rows, 2] template (which the
      // gradcheck perturbs too: its gradient must be, and is, zero).
      const Shape scatter_shape = g.rank() == root ? Shape{rows * g.size(), 2} : Shape{rows, 2};
      check(g, [&](const Variable& v) { return scatter(v, root, g); },
            rank_input(scatter_shape, g.rank()),
            rows * g.size() * 2 + (g.size() - 1) * rows * 2);
      check(g, [&](const Variable& v) { return gather(v, root, g); },
            rank_input({rows, 2}, g.rank()), g.size() * rows * 2);
    }
  }
}

DG_CASE("replicate: a replicated variable gets the gradient of every rank's loss",
        "[core][replicate]", 1, 2, 3, 4) {
  for (const Shape& shape : kShapes) {
    // Every rank checks every element of the one logical variable.
    check(g, [&](const Variable& v) { return replicate(v, g); }, rank_input(shape, 7),
          g.size() * shape_numel(shape), objective(GradcheckObjective::Sum, /*replicated_inputs=*/true));
  }
}

DG_CASE("all_to_all_single with splits: exact values, the lists differing on every rank",
        "[core][all_to_all]", 2) {
  // Rank 0 sends 1 row to itself and 2 to rank 1; rank 1 sends 3 rows to rank 0 and none to
  // itself.
  const bool r0 = g.rank() == 0;
  const std::vector<int64_t> in_splits = r0 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{3, 0};
  const std::vector<int64_t> out_splits = r0 ? std::vector<int64_t>{1, 3} : std::vector<int64_t>{2, 0};
  Variable x(r0 ? tensor<double>({1, 2, 3}) : tensor<double>({4, 5, 6}), true, "x");
  Variable y = all_to_all_single(x, out_splits, in_splits, g);
  const Tensor want_y = r0 ? tensor<double>({1, 4, 5, 6}) : tensor<double>({2, 3});
  expect(equal(y.value(), want_y), g, "y is " + y.value().to_string());
  y.backward(r0 ? tensor<double>({10, 40, 50, 60}) : tensor<double>({20, 30}));
  const Tensor want_dx = r0 ? tensor<double>({10, 20, 30}) : tensor<double>({40, 50, 60});
  expect(equal(x.grad(), want_dx), g, "dx is " + x.grad().to_string());
}

DG_CASE("every core op on sub-groups (the halves of the world, interleaved ranks)",
        "[core][groups]", 2, 4) {
  Group half = g.split(g.rank() % 2, g.rank());
  const int w = half.size();
  const Tensor x = rank_input({2 * w, 2}, g.rank());
  const int64_t elements = w * 2 * w * 2;
  const std::vector<int64_t> sizes(static_cast<size_t>(w), 2);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
    check(half, [&](const Variable& v) { return all_reduce(v, half, op); }, x, elements);
    check(half, [&](const Variable& v) { return all_reduce(v, half, op, Adjoint::Replicated); },
          x, elements, objective(GradcheckObjective::Replicated));
  }
  check(half, [&](const Variable& v) { return all_gather(v, half); }, x, elements);
  check(half, [&](const Variable& v) { return all_gather(v, half, Adjoint::Replicated); }, x,
        elements, objective(GradcheckObjective::Replicated));
  check(half, [&](const Variable& v) { return broadcast(v, 0, half, Adjoint::Replicated); }, x,
        elements, objective(GradcheckObjective::Replicated));
  // scatter: the root (half rank 0) holds [2w * w, 2] (w blocks of 2w rows); the others pass
  // the [2w, 2] template.
  const Tensor to_scatter =
      half.rank() == 0 ? rank_input({2 * w * w, 2}, g.rank()) : rank_input({2 * w, 2}, g.rank());
  check(half, [&](const Variable& v) { return scatter(v, 0, half); }, to_scatter,
        2 * w * w * 2 + (w - 1) * 2 * w * 2);
  check(half, [&](const Variable& v) { return all_gather_v(v, half); }, x, elements);
  check(half, [&](const Variable& v) { return reduce_scatter(v, half); }, x, elements);
  check(half, [&](const Variable& v) { return reduce_scatter_v(v, sizes, half); }, x, elements);
  check(half, [&](const Variable& v) { return all_to_all_single(v, sizes, sizes, half); }, x,
        elements);
  check(half, [&](const Variable& v) { return broadcast(v, w - 1, half); }, x, elements);
  check(half, [&](const Variable& v) { return gather(v, 0, half); }, x, elements);
  check(half, [&](const Variable& v) { return replicate(v, half); }, rank_input({2}, 9),
        w * 2, objective(GradcheckObjective::Sum, /*replicated_inputs=*/true));
}

DG_CASE("all_reduce adjoints contrasted: the P all_reduce gives dx = sum_r G_r on both ranks",
        "[core][all_reduce][worked]", 2) {
  Variable x(g.rank() == 0 ? tensor<double>({1, 2}) : tensor<double>({2, 3}), true, "x");
  Variable y = all_reduce(x, g);
  expect(equal(y.value(), tensor<double>({3, 5})), g, "y is " + y.value().to_string());
  y.backward(g.rank() == 0 ? tensor<double>({1, 10}) : tensor<double>({2, 20}));
  expect(equal(x.grad(), tensor<double>({3, 30})), g, "dx is " + x.grad().to_string());
}

TEST_CASE("core differentiable collectives reject bad arguments before any data moves",
          "[core]") {
  std::atomic<int> rejected{0};
  run_ranks(2, [&](Group& g) {
    auto count = [&](auto&& call) {
      try {
        call();
      } catch (const InvalidArgument&) {
        ++rejected;
      }
    };
    Variable v(ones({3, 2}));
    count([&] { all_reduce(v, g, ReduceOp::Prod); });
    count([&] { reduce_scatter(v, g); });                 // 3 rows, 2 ranks
    count([&] { reduce_scatter_v(v, {3}, g); });          // one size for two ranks
    count([&] { all_to_all_single(v, g); });              // 3 rows, 2 ranks
    count([&] { all_to_all_single(v, {1, 2}, {3}, g); });  // short input splits
    count([&] { broadcast(v, 2, g); });                   // no rank 2
    count([&] { gather(Variable(ones({})), 0, g); });     // 0-d
    count([&] { all_gather_v(Variable(ones({2}, DType::Int64)), g); });
  });
  CHECK(rejected == 16);
}

TEST_CASE("the differentiable collectives' refusals read as the raw collectives' (the "
          "Validator's words: op, rank and group, expected, given)",
          "[core]") {
  auto message = [](auto&& call) {
    try {
      call();
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("(nothing raised)");
  };
  // A null group: one sentence at every layer.
  const Group none;
  const std::string raw = message([&] { ferry::all_reduce(ones({2}), none); });
  const std::string diff = message([&] { all_reduce(Variable(ones({2})), none); });
  CHECK_THAT(raw, Catch::Contains("all_reduce: called on a null Group"));
  CHECK_THAT(diff, Catch::Contains("all_reduce: called on a null Group"));
  // Catch's checks are not thread-safe: the ranks keep their messages, checked afterwards.
  std::vector<std::vector<std::string>> got(2);
  run_ranks(2, [&](Group& g) {
    const Variable v(ones({3, 2}));
    got[static_cast<size_t>(g.rank())] = {
        message([&] { reduce_scatter(v, g); }),
        message([&] { gather(Variable(ones({})), 0, g); }),
        message([&] { all_gather_v(Variable(ones({2}, DType::Int64)), g); }),
        message([&] { all_reduce(Variable(), g); })};
  });
  for (int r = 0; r < 2; ++r) {
    const std::vector<std::string>& m = got[static_cast<size_t>(r)];
    const std::string where = " on rank " + std::to_string(r) + " of group";
    REQUIRE(m.size() == 4);
    CHECK_THAT(m[0], Catch::Contains("reduce_scatter" + where) &&
                         Catch::Contains("the input's rows (dim 0) must be a multiple of the "
                                         "group size 2, given 3 (shape [3, 2])"));
    CHECK_THAT(m[1], Catch::Contains("gather" + where) &&
                         Catch::Contains("the input must have at least one dimension (rows "
                                         "along dim 0), given a 0-d value"));
    CHECK_THAT(m[2], Catch::Contains("all_gather_v" + where) &&
                         Catch::Contains("the input must be float32 or float64 (what "
                                         "differentiable collectives take), given int64"));
    CHECK_THAT(m[3], Catch::Contains("all_reduce" + where) &&
                         Catch::Contains("the input must be a defined variable, given an "
                                         "undefined one"));
  }
}

DG_CASE("the R adjoints fail the sum objective and the P adjoints fail the replicated one",
        "[core][conventions]", 2, 3) {
  // Without this, a gradcheck that passed everything would pass the cases above too.
  const Tensor x = rank_input({2, 2}, g.rank());
  auto fails = [&](const char* what, const std::function<Variable(const Variable&)>& op,
                   GradcheckObjective o) {
    auto fn = [&](const std::vector<Variable>& in) { return std::vector<Variable>{op(in[0])}; };
    const auto r = distributed_gradcheck(fn, {x}, g, objective(o));
    expect(!r.ok, g, std::string(what) + " passed a gradcheck it must fail");
  };
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
    fails("all_reduce R", [&](const Variable& v) { return all_reduce(v, g, op, Adjoint::Replicated); },
          GradcheckObjective::Sum);
    fails("all_reduce P", [&](const Variable& v) { return all_reduce(v, g, op); },
          GradcheckObjective::Replicated);
  }
  fails("all_gather_v R", [&](const Variable& v) { return all_gather_v(v, g, Adjoint::Replicated); },
        GradcheckObjective::Sum);
  fails("all_gather R", [&](const Variable& v) { return all_gather(v, g, Adjoint::Replicated); },
        GradcheckObjective::Sum);
  fails("all_gather P", [&](const Variable& v) { return all_gather(v, g); },
        GradcheckObjective::Replicated);
  fails("broadcast R", [&](const Variable& v) { return broadcast(v, 0, g, Adjoint::Replicated); },
        GradcheckObjective::Sum);
  fails("broadcast P", [&](const Variable& v) { return broadcast(v, 0, g); },
        GradcheckObjective::Replicated);
}

DG_CASE("once wait() returns, the runtime holds no handle to a collective's output",
        "[core][ownership]", 1, 2, 3) {
  // Autograd keeps a gradient a collective wrote as grad() only when nothing else shares its
  // storage (otherwise it copies it, 16 MiB per step for a 16 MiB gradient). That holds only if
  // the op's task lets go of its tensors before completing.
  const Tensor x = rank_input({4, 2}, g.rank());
  for (int round = 0; round < 20; ++round) {
    Tensor reduced = empty({4, 2}, DType::Float64);
    ferry::all_reduce(x, reduced, g).wait();
    Tensor gathered = empty({4 * g.size(), 2}, DType::Float64);
    ferry::all_gather(x, gathered, g).wait();
    expect(reduced.owns_storage_alone() && gathered.owns_storage_alone(), g,
           "an output is still shared after wait() (round " + std::to_string(round) + ")");
  }
  Variable v(x, true);
  Variable y = all_reduce(v, g);
  y.backward(x);
  expect(v.grad().owns_storage_alone(), g, "x.grad() shares its storage");
}
