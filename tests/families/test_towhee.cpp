// towhee's AllGather / AllGather2 (collectives/towhee/towhee.h): both through the distributed
// gradcheck under the objective of their convention, at world sizes 1-4 and on a sub-group; hand-computed
// values, including the W = 4 case towhee gets wrong on two nodes; the equal-batch check.
#include <ferry/collectives/towhee/towhee.h>

#include "compat_checks.h"
#include "tests/differentiable/spmd_gradcheck.h"

#include <cmath>
#include <string>

using namespace ferry;
using namespace compat;

DG_CASE("towhee all_gather (R) and all_gather2 (P): gradcheck", "[towhee]", 1, 2, 3, 4) {
  for (const Group& group : compat::world_and_subgroup(g)) {
    for (const Shape& shape : {Shape{2, 1}, Shape{1, 2}, Shape{0, 2}}) {
      const Tensor x = rank_input(shape, g.rank());
      const int64_t elements = group.size() * shape_numel(shape);
      check(group, [&](const Variable& v) { return towhee::all_gather(v, group); }, x, elements,
            objective(GradcheckObjective::Replicated));
      check(group, [&](const Variable& v) { return towhee::all_gather2(v, group); }, x, elements,
            objective(GradcheckObjective::Sum));
    }
  }
}

namespace {

Tensor column(std::initializer_list<double> values) {
  return tensor<double>(values).reshape({static_cast<int64_t>(values.size()), 1});
}

void tc12_two_ranks(const Group& g) {
  const Tensor x_values = pick(g, {column({1, 2}), column({3, 4})});
  const Tensor G = pick(g, {column({1, 2, 3, 4}), column({10, 20, 30, 40})});
  for (bool second : {false, true}) {
    Variable x(x_values, true, "x");
    Variable y = second ? towhee::all_gather2(x, g) : towhee::all_gather(x, g);
    const std::string name = second ? "AllGather2" : "AllGather";
    expect_equal(y.value(), column({1, 2, 3, 4}), g, name + ": y");
    y.backward(G);
    expect_equal(x.grad(),
                 second ? pick(g, {column({11, 22}), column({33, 44})})
                        : pick(g, {column({1, 2}), column({30, 40})}),
                 g, name + ": dx");
  }
}

void tc12_one_rank(const Group& g) {
  for (bool second : {false, true}) {
    Variable x(column({1, 2}), true, "x");
    Variable y = second ? towhee::all_gather2(x, g) : towhee::all_gather(x, g);
    expect_equal(y.value(), column({1, 2}), g, "W = 1: y");
    y.backward(column({5, 6}));
    expect_equal(x.grad(), column({5, 6}), g, "W = 1: dx");
  }
}

// x_r = [[2r+1],[2r+2]], G_r = [1..8] * 10^r. towhee (local ranks 0,1,0,1 on two nodes) gave
// ranks 2 and 3 rows 0-1 and 2-3; with the group rank every rank gets its own rows.
void tc12_four_ranks(const Group& g) {
  const int r = g.rank();
  const double scale = std::pow(10.0, r);
  const Tensor G = column({scale, 2 * scale, 3 * scale, 4 * scale, 5 * scale, 6 * scale, 7 * scale,
              8 * scale});
  for (bool second : {false, true}) {
    Variable x(column({2.0 * r + 1, 2.0 * r + 2}), true, "x");
    Variable y = second ? towhee::all_gather2(x, g) : towhee::all_gather(x, g);
    const std::string name = second ? "AllGather2" : "AllGather";
    expect_equal(y.value(), column({1, 2, 3, 4, 5, 6, 7, 8}), g, name + ": y");
    y.backward(G);
    // AllGather: rows 2r, 2r+1 of the local G. AllGather2: the same rows of sum_r G_r, which is
    // [1..8] * 1111.
    const Tensor expected =
        second ? pick(g, {column({1111, 2222}), column({3333, 4444}), column({5555, 6666}),
                          column({7777, 8888})})
               : pick(g, {column({1, 2}), column({30, 40}), column({500, 600}),
                          column({7000, 8000})});
    expect_equal(x.grad(), expected, g, name + ": dx");
  }
}

}  // namespace

DG_CASE("towhee AllGather / AllGather2: hand-computed values at W = 2", "[towhee][worked]", 2) {
  tc12_two_ranks(g);
}

DG_CASE("towhee at W = 1 is the identity", "[towhee][worked]", 1) {
  tc12_one_rank(g);
}

DG_CASE("towhee at W = 4, every rank gets its own rows (not the local rank's)",
        "[towhee][worked]", 4) {
  tc12_four_ranks(g);
}

DG_CASE("towhee all_gather(2): unequal batch sizes raise the same error on every rank",
        "[towhee][errors]", 2, 3) {
  // Rank r has r + 1 rows: every rank must refuse, before any data moves.
  for (bool second : {false, true}) {
    std::string message;
    try {
      Variable x(zeros({g.rank() + 1, 2}, DType::Float64), true, "x");
      if (second) {
        towhee::all_gather2(x, g);
      } else {
        towhee::all_gather(x, g);
      }
    } catch (const InvalidArgument& e) {
      message = e.what();
    }
    const std::string op = second ? "towhee::all_gather2" : "towhee::all_gather";
    for (const std::string& part : {op, std::string("same batch size"),
                                    std::string("rank 0: 1 rows"),
                                    "rank " + std::to_string(g.size() - 1) + ": " +
                                        std::to_string(g.size()) + " rows"}) {
      expect(message.find(part) != std::string::npos, g,
             "the error should name '" + part + "', got: '" + message + "'");
    }
  }
  // A different row shape is refused too; equal batches then work on the same group.
  std::string message;
  try {
    towhee::all_gather(Variable(zeros({1, g.rank() == 0 ? 3 : 2}, DType::Float64)), g);
  } catch (const InvalidArgument& e) {
    message = e.what();
  }
  expect(message.find("same batch size and row shape") != std::string::npos, g,
         "unequal rows: got '" + message + "'");
  // The same number of elements per row in another shape ([2, 3] against [3, 2]) too: the
  // gather would otherwise reinterpret the other rank's rows.
  message.clear();
  try {
    const Shape row = g.rank() == 0 ? Shape{1, 2, 3} : Shape{1, 3, 2};
    towhee::all_gather2(Variable(zeros(row, DType::Float64)), g);
  } catch (const InvalidArgument& e) {
    message = e.what();
  }
  expect(message.find("another row shape") != std::string::npos, g,
         "rows of another shape with the same element count: got '" + message + "'");
  Variable y = towhee::all_gather(Variable(ones({1, 2}, DType::Float64)), g);
  expect(y.shape() == Shape({g.size(), 2}), g, "the group is usable after the errors");
}
