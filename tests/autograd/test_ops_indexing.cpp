// index_select and embedding_bag: values, gradcheck (weights and per-sample weights), errors.
#include <ferry/autograd/ops.h>
#include "math_reference.h"
#include "op_checks.h"

#include <catch2/catch.hpp>

using namespace ferry;
using namespace ferry::testing;
using Catch::Contains;

TEST_CASE("index_select picks slices and scatters gradients back", "[ops]") {
  const Tensor a = random64({4, 3}, 1);
  const Tensor idx = int64s({3, 1, 3});
  const Variable rows = index_select(Variable(a), 0, idx);
  REQUIRE(rows.shape() == Shape{3, 3});
  CHECK(equal(rows.value().narrow(0, 0, 1), a.narrow(0, 3, 1)));
  CHECK(equal(rows.value().narrow(0, 1, 1), a.narrow(0, 1, 1)));
  const Variable cols = index_select(Variable(a), 1, int64s({2, 0}));
  REQUIRE(cols.shape() == Shape{4, 2});
  CHECK(cols.value().get_flat(0) == a.get_flat(2));
  for (int64_t dim : {0, -1}) {
    CAPTURE(dim);
    const Tensor picks = dim == 0 ? idx : int64s({2, 2, 0});
    check_gradients(single([=](const auto& in) { return index_select(in[0], dim, picks); }),
                    {a});
    check_gradients(single([=](const auto& in) { return index_select(in[0], dim, int64s({})); }),
                    {a});
  }
  check_gradients(single([](const auto& in) { return index_select(in[0], 1, int64s({0})); }),
                  {random64({0, 2}, 2)});
  // A repeated row receives the sum of its picks' gradients.
  Variable x(a, true, "x");
  backward(sum(index_select(x, 0, idx)));
  CHECK(equal(x.grad().narrow(0, 3, 1), full({1, 3}, 2.0, DType::Float64)));
  CHECK(equal(x.grad().narrow(0, 0, 1), zeros({1, 3}, DType::Float64)));
  REQUIRE_THROWS_WITH(index_select(Variable(a), 0, int64s({4})),
                      Contains("index_select") && Contains("index 4"));
  REQUIRE_THROWS_WITH(index_select(Variable(a), 0, from_vector(std::vector<double>{1.0})),
                      Contains("index_select") && Contains("int64"));
}

TEST_CASE("embedding_bag values and gradients", "[ops]") {
  const Tensor w = random64({6, 3}, 10);
  // Bags [5, 0], [] and [2, 2, 4]: an empty bag and a repeated row.
  const Tensor idx = int64s({5, 0, 2, 2, 4});
  const Tensor offsets = int64s({0, 2, 2});
  const Tensor psw = random64({5}, 11);
  for (EmbeddingBagMode mode : {EmbeddingBagMode::Sum, EmbeddingBagMode::Mean}) {
    CAPTURE(embedding_bag_mode_name(mode));
    const Variable y = embedding_bag(Variable(w), idx, offsets, mode);
    REQUIRE(y.shape() == Shape{3, 3});
    const double scale = mode == EmbeddingBagMode::Mean ? 1.0 / 3 : 1.0;
    const double expected = (w.get_flat(2 * 3) * 2 + w.get_flat(4 * 3)) * scale;
    CHECK(y.value().get_flat(2 * 3) == Approx(expected));
    CHECK(equal(y.value().narrow(0, 1, 1), zeros({1, 3}, DType::Float64)));
    check_gradients(
        single([=](const auto& in) { return embedding_bag(in[0], idx, offsets, mode); }), {w});
  }
  const Variable weighted = embedding_bag(Variable(w), idx, offsets, EmbeddingBagMode::Sum,
                                          Variable(psw));
  const double expected = w.get_flat(5 * 3 + 1) * psw.get_flat(0) +
                          w.get_flat(0 * 3 + 1) * psw.get_flat(1);
  CHECK(weighted.value().get_flat(1) == Approx(expected));
  // Differentiable in both the table and the per-sample weights.
  check_gradients(single([=](const auto& in) {
                    return embedding_bag(in[0], idx, offsets, EmbeddingBagMode::Sum, in[1]);
                  }),
                  {w, psw});
  // Only the per-sample weights require grad: the table gets nothing.
  Variable table(w, false, "table");
  Variable scales(psw, true, "scales");
  backward(sum(embedding_bag(table, idx, offsets, EmbeddingBagMode::Sum, scales)));
  CHECK_FALSE(table.grad().defined());
  REQUIRE(scales.grad().shape() == Shape{5});
  double row0 = 0;
  for (int64_t j = 0; j < 3; ++j) row0 += w.get_flat(5 * 3 + j);
  CHECK(scales.grad().get_flat(0) == Approx(row0));
  // Zero-size: no indices, every bag empty; no bags at all.
  check_gradients(single([](const auto& in) {
                    return embedding_bag(in[0], int64s({}), int64s({0, 0}), EmbeddingBagMode::Mean);
                  }),
                  {w});
  check_gradients(single([](const auto& in) {
                    return embedding_bag(in[0], int64s({}), int64s({}), EmbeddingBagMode::Sum,
                                         in[1]);
                  }),
                  {random64({0, 3}, 12), random64({0}, 13)});
}

TEST_CASE("embedding_bag rejects bad arguments by name", "[ops]") {
  const Variable w(zeros({6, 3}), true, "w");
  const Tensor idx = int64s({1, 2});
  REQUIRE_THROWS_WITH(embedding_bag(w, idx, int64s({0}), EmbeddingBagMode::Mean,
                                    Variable(ones({2}))),
                      Contains("embedding_bag") && Contains("per_sample_weights") &&
                          Contains("mean"));
  REQUIRE_THROWS_WITH(embedding_bag(w, idx, int64s({1})),
                      Contains("embedding_bag") && Contains("offsets[0]"));
  REQUIRE_THROWS_WITH(embedding_bag(w, int64s({1, 6}), int64s({0})),
                      Contains("embedding_bag") && Contains("index 6"));
  REQUIRE_THROWS_WITH(embedding_bag(Variable(zeros({6})), idx, int64s({0})),
                      Contains("embedding_bag") && Contains("[6]"));
  REQUIRE_THROWS_WITH(embedding_bag(w, idx, int64s({0}), EmbeddingBagMode::Sum,
                                    Variable(ones({3}))),
                      Contains("embedding_bag") && Contains("[2]") && Contains("[3]"));
}
