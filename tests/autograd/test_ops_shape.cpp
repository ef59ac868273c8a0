// reshape, cat, split, chunk, narrow: values, views, gradcheck with unused outputs, errors.
#include <ferry/autograd/ops.h>
#include "math_reference.h"
#include "op_checks.h"

#include <catch2/catch.hpp>

using namespace ferry;
using namespace ferry::testing;
using Catch::Contains;

namespace {

std::vector<Shape> shapes_of(const std::vector<Variable>& vs) {
  std::vector<Shape> out;
  for (const Variable& v : vs) out.push_back(v.shape());
  return out;
}

}  // namespace

TEST_CASE("reshape is a view and its gradient reshapes back", "[ops]") {
  const Variable x(random64({2, 6}, 1));
  const Variable y = reshape(x, {3, -1});
  CHECK(y.shape() == Shape{3, 4});
  CHECK(y.value().shares_storage_with(x.value()));
  CHECK(equal(y.value().flatten(), x.value().flatten()));
  check_gradients(single([](const auto& in) { return reshape(in[0], {4, 3}); }),
                  {random64({2, 6}, 2)});
  check_gradients(single([](const auto& in) { return reshape(in[0], {-1}); }),
                  {random64({0, 3}, 3)});
  check_gradients(single([](const auto& in) { return reshape(in[0], {1, 1}); }),
                  {random64({}, 4)});
  REQUIRE_THROWS_WITH(reshape(x, {5, 2}), Contains("reshape") && Contains("[2, 6]") &&
                                              Contains("[5, 2]"));
  REQUIRE_THROWS_WITH(reshape(x, {-1, -1}), Contains("reshape") && Contains("[-1, -1]"));
  REQUIRE_THROWS_WITH(reshape(x, {5, -1}), Contains("reshape") && Contains("[5, -1]"));
}

TEST_CASE("cat along any dim", "[ops]") {
  const Tensor a = random64({2, 3}, 10);
  const Tensor b = random64({1, 3}, 11);
  const Tensor c = random64({2, 2}, 12);
  const Variable ab = cat({Variable(a), Variable(b)}, 0);
  REQUIRE(ab.shape() == Shape{3, 3});
  CHECK(equal(ab.value().narrow(0, 2, 1), b));
  const Variable ac = cat({Variable(a), Variable(c)}, -1);
  REQUIRE(ac.shape() == Shape{2, 5});
  CHECK(ac.value().get_flat(4) == c.get_flat(1));
  check_gradients(single([](const auto& in) { return cat({in[0], in[1]}, 0); }), {a, b});
  check_gradients(single([](const auto& in) { return cat({in[0], in[1], in[0]}, 1); }),
                  {a, c});
  check_gradients(single([](const auto& in) { return cat({in[0], in[1]}, 1); }),
                  {random64({2, 0}, 13), random64({2, 3}, 14)});
  check_gradients(single([](const auto& in) { return cat({in[0]}, 0); }), {random64({0, 2}, 15)});
  // An input that does not require grad gets none.
  Variable g(a, true, "g");
  const Variable fixed(b);
  backward(sum(cat({g, fixed})));
  CHECK(equal(g.grad(), ones({2, 3}, DType::Float64)));
  CHECK_FALSE(fixed.grad().defined());
  REQUIRE_THROWS_WITH(cat({Variable(a), Variable(c)}, 0),
                      Contains("cat") && Contains("[2, 2]") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(cat(std::vector<Variable>{}, 0), Contains("cat"));
  REQUIRE_THROWS_WITH(cat({Variable(a)}, 2), Contains("cat") && Contains("dim 2"));
  REQUIRE_THROWS_WITH(cat({Variable(a), Variable(b.to(DType::Float32))}),
                      Contains("cat") && Contains("float32") && Contains("float64"));
}

TEST_CASE("split and chunk sizes follow torch", "[ops]") {
  const Variable x(random64({5, 4}, 20));
  CHECK(shapes_of(split(x, 2)) == std::vector<Shape>{{2, 4}, {2, 4}, {1, 4}});
  CHECK(shapes_of(split(x, 3, 1)) == std::vector<Shape>{{5, 3}, {5, 1}});
  CHECK(shapes_of(split(x, {1, 0, 4})) == std::vector<Shape>{{1, 4}, {0, 4}, {4, 4}});
  CHECK(shapes_of(split(x, {3, 1}, -1)) == std::vector<Shape>{{5, 3}, {5, 1}});
  CHECK(shapes_of(chunk(x, 2)) == std::vector<Shape>{{3, 4}, {2, 4}});
  // ceil(5 / 4) = 2: three pieces, not four.
  CHECK(shapes_of(chunk(x, 4)) == std::vector<Shape>{{2, 4}, {2, 4}, {1, 4}});
  CHECK(shapes_of(chunk(x, 3, 1)) == std::vector<Shape>{{5, 2}, {5, 2}});
  const Variable empty(zeros({0, 4}, DType::Float64));
  CHECK(shapes_of(split(empty, 2)) == std::vector<Shape>{{0, 4}});
  CHECK(shapes_of(chunk(empty, 3)) == std::vector<Shape>{{0, 4}, {0, 4}, {0, 4}});
  // Pieces along dim 0 are views; their values are the right slices either way.
  const std::vector<Variable> rows = split(x, 2);
  CHECK(rows[1].value().shares_storage_with(x.value()));
  CHECK(equal(rows[1].value(), x.value().narrow_copy(0, 2, 2)));
  CHECK(equal(split(x, 3, 1)[1].value(), x.value().narrow_copy(1, 3, 1)));
}

TEST_CASE("split and chunk gradcheck, also with unused pieces", "[ops]") {
  const Tensor a = random64({5, 4}, 21);
  check_gradients([](const auto& in) { return split(in[0], 2); }, {a});
  check_gradients([](const auto& in) { return split(in[0], {1, 3}, 1); }, {a});
  check_gradients([](const auto& in) { return chunk(in[0], 3, -1); }, {a});
  // Only some pieces reach the objective: the others contribute zero gradients.
  check_gradients(
      [](const auto& in) {
        std::vector<Variable> p = split(in[0], 2);
        return std::vector<Variable>{p[0], p[2]};
      },
      {a});
  check_gradients(
      [](const auto& in) {
        std::vector<Variable> p = chunk(in[0], 2, 1);
        return std::vector<Variable>{p[1]};
      },
      {a});
  check_gradients([](const auto& in) { return split(in[0], {0, 2, 0}, 0); },
                  {random64({2, 3}, 22)});
  check_gradients([](const auto& in) { return chunk(in[0], 2); }, {random64({0, 3}, 23)});
  // The unused piece's share of the gradient is exactly zero.
  Variable x(a, true, "x");
  const std::vector<Variable> p = split(x, {2, 3});
  backward(sum(p[1]));
  CHECK(equal(x.grad().narrow(0, 0, 2), zeros({2, 4}, DType::Float64)));
  CHECK(equal(x.grad().narrow(0, 2, 3), ones({3, 4}, DType::Float64)));

  const Variable v(a);
  REQUIRE_THROWS_WITH(split(v, {2, 2}), Contains("split") && Contains("[2, 2]") &&
                                            Contains("[5, 4]"));
  REQUIRE_THROWS_WITH(split(v, {6, -1}), Contains("split") && Contains("[6, -1]"));
  REQUIRE_THROWS_WITH(split(v, 0), Contains("split") && Contains("split_size"));
  REQUIRE_THROWS_WITH(split(v, 2, 2), Contains("split") && Contains("dim 2"));
  REQUIRE_THROWS_WITH(chunk(v, 0), Contains("chunk") && Contains("chunks"));
  REQUIRE_THROWS_WITH(chunk(Variable(full({}, 1.0)), 2), Contains("chunk") && Contains("[]"));
}

TEST_CASE("narrow along any dim", "[ops]") {
  const Tensor a = random64({4, 5}, 30);
  const Variable rows = narrow(Variable(a), 0, 1, 2);
  CHECK(rows.value().shares_storage_with(a));
  CHECK(equal(rows.value(), a.narrow_copy(0, 1, 2)));
  CHECK(equal(narrow(Variable(a), 1, 2, 3).value(), a.narrow_copy(1, 2, 3)));
  // A negative start counts from the back.
  CHECK(equal(narrow(Variable(a), -1, -2, 2).value(), a.narrow_copy(1, 3, 2)));
  for (int64_t dim : {0, 1}) {
    CAPTURE(dim);
    check_gradients(single([=](const auto& in) { return narrow(in[0], dim, 1, 2); }), {a});
    check_gradients(single([=](const auto& in) { return narrow(in[0], dim, 0, 0); }), {a});
    check_gradients(single([=](const auto& in) { return narrow(in[0], dim, 0, 4); }), {a});
  }
  check_gradients(single([](const auto& in) { return narrow(in[0], 1, 1, 1); }),
                  {random64({0, 3}, 31)});
  REQUIRE_THROWS_WITH(narrow(Variable(a), 1, 4, 2),
                      Contains("narrow") && Contains("start 4") && Contains("[4, 5]"));
  REQUIRE_THROWS_WITH(narrow(Variable(a), 0, -5, 1), Contains("narrow") && Contains("[4, 5]"));
  REQUIRE_THROWS_WITH(narrow(Variable(a), 2, 0, 1), Contains("narrow") && Contains("dim 2"));
}
