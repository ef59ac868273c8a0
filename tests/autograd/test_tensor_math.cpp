// ferry::kernels against independent loop references: values, zero-size shapes, every error.
#include <ferry/autograd/tensor_math.h>
#include "math_reference.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace ferry;
using namespace ferry::testing;
using Catch::Contains;

namespace {

const DType kFloatTypes[] = {DType::Float32, DType::Float64};

// Shapes a binary kernel is given and the result it must produce, element by element.
struct BroadcastCase {
  Shape a;
  Shape b;
  Shape out;
};

// The element of an operand of `shape` that result element `i` (of `out`) reads.
double operand_at(const Tensor& t, const Shape& out, int64_t i) {
  if (t.dim() == 0) return t.item();
  if (t.shape() == out) return t.get_flat(i);
  return t.get_flat(i % out.back());  // a [M] bias: the column of the result element
}

Tensor ref_broadcast(const Tensor& a, const Tensor& b, const Shape& out,
                     const std::function<double(double, double)>& f) {
  Tensor r = zeros(out, DType::Float64);
  for (int64_t i = 0; i < r.numel(); ++i) {
    r.set_flat(i, f(operand_at(a, out, i), operand_at(b, out, i)));
  }
  return r.to(a.dtype());
}

}  // namespace

TEST_CASE("kernels: binary kernels follow the three broadcast rules", "[kernels]") {
  const std::vector<BroadcastCase> cases = {
      {{2, 3}, {2, 3}, {2, 3}},    {{2, 3, 4}, {4}, {2, 3, 4}}, {{4}, {2, 3, 4}, {2, 3, 4}},
      {{}, {2, 3}, {2, 3}},        {{2, 3}, {}, {2, 3}},        {{}, {}, {}},
      {{0, 3}, {3}, {0, 3}},       {{2, 0}, {0}, {2, 0}},       {{0, 3}, {0, 3}, {0, 3}},
      {{5}, {5}, {5}},             {{}, {0}, {0}},
  };
  struct Op {
    const char* name;
    Tensor (*kernel)(const Tensor&, const Tensor&);
    std::function<double(double, double)> ref;
  };
  const std::vector<Op> ops = {
      {"add", kernels::add, [](double x, double y) { return x + y; }},
      {"sub", kernels::sub, [](double x, double y) { return x - y; }},
      {"mul", kernels::mul, [](double x, double y) { return x * y; }},
      {"div", kernels::div, [](double x, double y) { return x / y; }},
  };
  uint64_t seed = 1;
  for (DType dtype : kFloatTypes) {
    for (const BroadcastCase& c : cases) {
      // Keep divisors away from 0 so float32 rounding stays relative.
      const Tensor a = uniform(c.a, 0.5, 2.0, seed++, dtype);
      const Tensor b = uniform(c.b, 0.5, 2.0, seed++, dtype);
      for (const Op& op : ops) {
        CAPTURE(op.name, shape_str(c.a), shape_str(c.b), dtype_name(dtype));
        const Tensor out = op.kernel(a, b);
        CHECK(out.shape() == c.out);
        CHECK(out.dtype() == dtype);
        CHECK(kernels::broadcast_shape(op.name, c.a, c.b) == c.out);
        CHECK(allclose(out, ref_broadcast(a, b, c.out, op.ref), 1e-6, 1e-7));
        CHECK_FALSE(out.shares_storage_with(a));
        CHECK_FALSE(out.shares_storage_with(b));
      }
    }
  }
}

TEST_CASE("kernels: binary kernels reject other shapes and dtypes", "[kernels]") {
  const Tensor a = zeros({2, 3});
  REQUIRE_THROWS_WITH(kernels::add(a, zeros({2})),
                      Contains("add") && Contains("[2, 3]") && Contains("[2]"));
  REQUIRE_THROWS_WITH(kernels::mul(zeros({3, 1}), zeros({1, 3})),
                      Contains("mul") && Contains("[3, 1]") && Contains("[1, 3]"));
  // [1] is not a 0-d scalar, and a bias needs a partner of rank >= 2.
  REQUIRE_THROWS_WITH(kernels::sub(zeros({4}), zeros({1})), Contains("sub") && Contains("[1]"));
  REQUIRE_THROWS_WITH(kernels::div(zeros({2, 3}), zeros({2, 3, 1})), Contains("div"));
  REQUIRE_THROWS_WITH(kernels::add(zeros({2}, DType::Int32), zeros({2}, DType::Int32)),
                      Contains("add: dtype int32 is not supported (float32 or float64)"));
  REQUIRE_THROWS_WITH(kernels::add(zeros({2}), zeros({2}, DType::Float64)),
                      Contains("add") && Contains("float32") && Contains("float64"));
  REQUIRE_THROWS_WITH(kernels::add(Tensor(), zeros({2})), Contains("add") && Contains("undefined"));
}

TEST_CASE("kernels: reduce_to_shape undoes each broadcast", "[kernels]") {
  const Tensor g = random64({2, 3, 4}, 7);
  CHECK(equal(kernels::reduce_to_shape("add", g, {2, 3, 4}), g));
  CHECK_FALSE(kernels::reduce_to_shape("add", g, {2, 3, 4}).shares_storage_with(g));
  double total = 0;
  for (int64_t i = 0; i < g.numel(); ++i) total += g.get_flat(i);
  const Tensor all = kernels::reduce_to_shape("add", g, {});
  CHECK(all.dim() == 0);
  CHECK(all.item() == Approx(total));
  const Tensor cols = kernels::reduce_to_shape("add", g, {4});
  REQUIRE(cols.shape() == Shape{4});
  for (int64_t c = 0; c < 4; ++c) {
    double s = 0;
    for (int64_t r = 0; r < 6; ++r) s += g.get_flat(r * 4 + c);
    CHECK(cols.get_flat(c) == Approx(s));
  }
  CHECK(equal(kernels::reduce_to_shape("add", zeros({0, 3}), {3}), zeros({3})));
  REQUIRE_THROWS_WITH(kernels::reduce_to_shape("mul", g, {3}),
                      Contains("mul") && Contains("[2, 3, 4]") && Contains("[3]"));
}

TEST_CASE("kernels: scalar kernels", "[kernels]") {
  for (DType dtype : kFloatTypes) {
    const Tensor a = uniform({3, 4}, 0.5, 3.0, 11, dtype);
    CHECK(allclose(kernels::add(a, 1.5), ref_map(a, [](double x) { return x + 1.5; })));
    CHECK(allclose(kernels::mul(a, -2.0), ref_map(a, [](double x) { return x * -2.0; })));
    CHECK(allclose(kernels::scalar_sub(1.0, a), ref_map(a, [](double x) { return 1.0 - x; })));
    CHECK(allclose(kernels::scalar_div(2.0, a), ref_map(a, [](double x) { return 2.0 / x; })));
    CHECK(allclose(kernels::neg(a), ref_map(a, [](double x) { return -x; })));
    CHECK(kernels::neg(zeros({0, 2}, dtype)).shape() == Shape{0, 2});
  }
  // div by a double is a division in the tensor's dtype, not a product with a rounded
  // reciprocal: compare bit for bit with float's own division.
  const Tensor a = uniform({1000}, -10.0, 10.0, 3, DType::Float32);
  std::vector<float> expected;
  for (float x : a.to_vector<float>()) expected.push_back(x / 3.0f);
  CHECK(equal(kernels::div(a, 3.0), from_vector(expected)));
  REQUIRE_THROWS_WITH(kernels::mul(zeros({2}, DType::Int64), 2.0),
                      Contains("mul: dtype int64 is not supported"));
  REQUIRE_THROWS_WITH(kernels::scalar_div(1.0, zeros({2}, DType::UInt8)),
                      Contains("div: dtype uint8"));
}

TEST_CASE("kernels: matmul and transpose", "[kernels]") {
  for (DType dtype : kFloatTypes) {
    const Tensor a = uniform({3, 5}, -1, 1, 1, dtype);
    const Tensor b = uniform({5, 2}, -1, 1, 2, dtype);
    const Tensor c = kernels::matmul(a, b);
    CHECK(c.shape() == Shape{3, 2});
    CHECK(allclose(c, ref_matmul(a, b), 1e-5, 1e-6));
    const Tensor t = kernels::transpose(a);
    const Tensor bt = kernels::transpose(b);
    CHECK(allclose(kernels::matmul(t, b, true, false), c, 1e-6, 1e-7));
    CHECK(allclose(kernels::matmul(a, bt, false, true), c, 1e-6, 1e-7));
    CHECK(allclose(kernels::matmul(t, bt, true, true), c, 1e-6, 1e-7));
    REQUIRE(t.shape() == Shape{5, 3});
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 5; ++j) CHECK(t.get_flat(j * 3 + i) == a.get_flat(i * 5 + j));
    }
  }
  // An empty inner dim is an empty sum: zeros, not garbage.
  CHECK(equal(kernels::matmul(ones({2, 0}), ones({0, 3})), zeros({2, 3})));
  CHECK(kernels::matmul(ones({0, 3}), ones({3, 2})).shape() == Shape{0, 2});
  CHECK(kernels::transpose(zeros({0, 4})).shape() == Shape{4, 0});
  REQUIRE_THROWS_WITH(kernels::matmul(zeros({2, 3}), zeros({2, 3})),
                      Contains("matmul") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(kernels::matmul(zeros({2, 3}), zeros({3, 2}), false, true),
                      Contains("matmul") && Contains("[3, 2] (transposed)"));
  CHECK(kernels::matmul(zeros({2, 3}), zeros({2, 3}), true, false).shape() == Shape{3, 3});
  REQUIRE_THROWS_WITH(kernels::matmul(zeros({3}), zeros({3, 2})),
                      Contains("matmul") && Contains("[3]") && Contains("[3, 2]"));
  REQUIRE_THROWS_WITH(kernels::transpose(zeros({2, 3, 4})), Contains("transpose") &&
                                                                Contains("[2, 3, 4]"));
  REQUIRE_THROWS_WITH(kernels::matmul(zeros({2, 2}, DType::Int32), zeros({2, 2}, DType::Int32)),
                      Contains("matmul: dtype int32"));
}

TEST_CASE("kernels: sum and mean over everything and along a dim", "[kernels]") {
  for (DType dtype : kFloatTypes) {
    const Tensor a = uniform({2, 3, 4}, -1, 1, 5, dtype);
    double total = 0;
    for (int64_t i = 0; i < a.numel(); ++i) total += a.get_flat(i);
    CHECK(kernels::sum(a).dim() == 0);
    CHECK(kernels::sum(a).item() == Approx(total).epsilon(1e-5));
    CHECK(kernels::mean(a).item() == Approx(total / 24).epsilon(1e-5));
    for (int64_t dim : {0, 1, 2, -1, -3}) {
      for (bool keepdim : {false, true}) {
        CAPTURE(dim, keepdim, dtype_name(dtype));
        const int64_t d = dim < 0 ? dim + 3 : dim;
        const Tensor s = kernels::sum(a, dim, keepdim);
        const Tensor expected = ref_sum_dim(a, d, keepdim);
        CHECK(s.shape() == expected.shape());
        CHECK(allclose(s, expected, 1e-5, 1e-6));
        const double extent = static_cast<double>(a.size(d));
        CHECK(allclose(kernels::mean(a, dim, keepdim),
                       ref_map(expected, [&](double x) { return x / extent; }), 1e-5, 1e-6));
      }
    }
  }
  // Zero-size: the empty sum is 0 and the empty mean 0/0 = NaN, as torch.
  CHECK(kernels::sum(zeros({0, 3})).item() == 0.0);
  CHECK(std::isnan(kernels::mean(zeros({0, 3})).item()));
  CHECK(equal(kernels::sum(zeros({0, 3}), 0), zeros({3})));
  const Tensor empty_means = kernels::mean(zeros({2, 0}), 1, true);
  REQUIRE(empty_means.shape() == Shape{2, 1});
  CHECK(std::isnan(empty_means.get_flat(0)));
  CHECK(kernels::sum(zeros({0, 3}), 1).shape() == Shape{0});
  // A 0-d tensor reduces along dim 0 or -1 to itself.
  const Tensor scalar = full({}, 2.5);
  CHECK(equal(kernels::sum(scalar, 0), scalar));
  CHECK(equal(kernels::mean(scalar, -1, true), scalar));
  REQUIRE_THROWS_WITH(kernels::sum(scalar, 1), Contains("sum") && Contains("0-d"));
  REQUIRE_THROWS_WITH(kernels::mean(zeros({2, 3}), 2), Contains("mean") && Contains("dim 2") &&
                                                           Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(kernels::sum(zeros({2}, DType::Int32)), Contains("sum: dtype int32"));
}

TEST_CASE("kernels: expand_scalar and expand_dim repeat a reduced gradient", "[kernels]") {
  CHECK(equal(kernels::expand_scalar(full({}, 3.0), {2, 2}), full({2, 2}, 3.0)));
  CHECK(kernels::expand_scalar(full({}, 3.0), {0, 2}).shape() == Shape{0, 2});
  REQUIRE_THROWS_WITH(kernels::expand_scalar(zeros({2}), {2, 2}), Contains("[2]"));
  const Shape shape{2, 3, 4};
  for (int64_t dim : {0, 1, 2, -2}) {
    for (bool keepdim : {false, true}) {
      CAPTURE(dim, keepdim);
      const int64_t d = dim < 0 ? dim + 3 : dim;
      Shape reduced = shape;
      if (keepdim) {
        reduced[static_cast<size_t>(d)] = 1;
      } else {
        reduced.erase(reduced.begin() + d);
      }
      const Tensor g = random64(reduced, 9);
      const Tensor out = kernels::expand_dim(g, shape, dim);
      REQUIRE(out.shape() == shape);
      for (int64_t i = 0; i < out.numel(); ++i) {
        std::vector<int64_t> index = unravel(i, shape);
        if (keepdim) {
          index[static_cast<size_t>(d)] = 0;
        } else {
          index.erase(index.begin() + d);
        }
        CHECK(out.get_flat(i) == g.get_flat(ravel(index, reduced)));
      }
    }
  }
  CHECK(kernels::expand_dim(zeros({3}), {0, 3}, 0).shape() == Shape{0, 3});
  CHECK(equal(kernels::expand_dim(full({}, 2.0), {}, 0), full({}, 2.0)));
  REQUIRE_THROWS_WITH(kernels::expand_dim(zeros({4}), {2, 3}, 0),
                      Contains("[4]") && Contains("[2, 3]"));
}

TEST_CASE("kernels: index_select and index_add along any dim", "[kernels]") {
  const Tensor a = random64({4, 3, 2}, 21);
  const Tensor idx = int64s({2, 0, 2});
  for (int64_t dim : {0, 1, -1}) {
    CAPTURE(dim);
    const int64_t d = dim < 0 ? dim + 3 : dim;
    const Tensor picked = kernels::index_select(a, dim, d == 2 ? int64s({1, 1, 0}) : idx);
    const Tensor used = d == 2 ? int64s({1, 1, 0}) : idx;
    Shape expected_shape = a.shape();
    expected_shape[static_cast<size_t>(d)] = 3;
    REQUIRE(picked.shape() == expected_shape);
    for (int64_t i = 0; i < picked.numel(); ++i) {
      std::vector<int64_t> index = unravel(i, expected_shape);
      index[static_cast<size_t>(d)] = used.to_vector<int64_t>()[static_cast<size_t>(index[d])];
      CHECK(picked.get_flat(i) == a.get_flat(ravel(index, a.shape())));
    }
    // index_add is the adjoint: <index_select(a), g> == <a, index_add(g)> for every a, g.
    const Tensor g = random64(expected_shape, 22);
    const Tensor back = kernels::index_add(a.shape(), dim, used, g);
    double lhs = 0, rhs = 0;
    for (int64_t i = 0; i < g.numel(); ++i) lhs += picked.get_flat(i) * g.get_flat(i);
    for (int64_t i = 0; i < a.numel(); ++i) rhs += a.get_flat(i) * back.get_flat(i);
    CHECK(lhs == Approx(rhs));
  }
  // Repeated indices accumulate.
  const Tensor summed = kernels::index_add({2, 2}, 0, int64s({1, 1}), ones({2, 2}, DType::Float64));
  CHECK(equal(summed, from_vector(std::vector<double>{0, 0, 2, 2}, {2, 2})));
  CHECK(kernels::index_select(a, 0, int64s({})).shape() == Shape{0, 3, 2});
  CHECK(kernels::index_select(zeros({0, 3}), 1, int64s({2})).shape() == Shape{0, 1});
  REQUIRE_THROWS_WITH(kernels::index_select(a, 0, int64s({1, 4})),
                      Contains("index_select") && Contains("index 4") && Contains("[0, 4)") &&
                          Contains("dim 0 of shape [4, 3, 2]"));
  REQUIRE_THROWS_WITH(kernels::index_select(a, 0, int64s({-1})),
                      Contains("index_select") && Contains("index -1"));
  REQUIRE_THROWS_WITH(kernels::index_select(a, 0, from_vector(std::vector<int32_t>{0})),
                      Contains("index_select") && Contains("int64") && Contains("int32"));
  REQUIRE_THROWS_WITH(kernels::index_select(a, 3, idx), Contains("index_select") &&
                                                            Contains("dim 3"));
  REQUIRE_THROWS_WITH(kernels::index_add({4, 3}, 0, int64s({9}), zeros({1, 3}, DType::Float64)),
                      Contains("index_add") && Contains("index 9"));
  REQUIRE_THROWS_WITH(kernels::index_add({4, 3}, 0, idx, zeros({2, 3}, DType::Float64)),
                      Contains("index_add") && Contains("[3, 3]") && Contains("[2, 3]"));
}

namespace {

// embedding_bag by its definition: bag b = rows indices[offsets[b] .. next offset).
Tensor ref_embedding_bag(const Tensor& w, const std::vector<int64_t>& idx,
                         const std::vector<int64_t>& offsets, EmbeddingBagMode mode,
                         const std::vector<double>& psw) {
  const int64_t d = w.size(1);
  const auto n = static_cast<int64_t>(idx.size());
  Tensor out = zeros({static_cast<int64_t>(offsets.size()), d}, DType::Float64);
  for (size_t b = 0; b < offsets.size(); ++b) {
    const int64_t end = b + 1 < offsets.size() ? offsets[b + 1] : n;
    const int64_t count = end - offsets[b];
    for (int64_t k = offsets[b]; k < end; ++k) {
      double scale = psw.empty() ? 1.0 : psw[static_cast<size_t>(k)];
      if (mode == EmbeddingBagMode::Mean) scale /= static_cast<double>(count);
      for (int64_t j = 0; j < d; ++j) {
        const int64_t o = static_cast<int64_t>(b) * d + j;
        out.set_flat(o, out.get_flat(o) + scale * w.get_flat(idx[static_cast<size_t>(k)] * d + j));
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("kernels: embedding_bag pools bags like torch", "[kernels]") {
  const Tensor w = random64({5, 3}, 31);
  const std::vector<int64_t> idx{4, 0, 2, 2, 1, 3};
  // Bags: [4, 0], [], [2, 2, 1], [3] -- one empty bag in the middle.
  const std::vector<int64_t> offsets{0, 2, 2, 5};
  const std::vector<double> psw{0.5, -1.0, 2.0, 0.25, 1.5, -0.75};
  for (EmbeddingBagMode mode : {EmbeddingBagMode::Sum, EmbeddingBagMode::Mean}) {
    CAPTURE(embedding_bag_mode_name(mode));
    const Tensor out = kernels::embedding_bag(w, int64s(idx), int64s(offsets), mode);
    REQUIRE(out.shape() == Shape{4, 3});
    CHECK(allclose(out, ref_embedding_bag(w, idx, offsets, mode, {})));
    CHECK(equal(out.narrow(0, 1, 1), zeros({1, 3}, DType::Float64)));
  }
  const Tensor weighted = kernels::embedding_bag(w, int64s(idx), int64s(offsets),
                                                 EmbeddingBagMode::Sum, from_vector(psw));
  CHECK(allclose(weighted, ref_embedding_bag(w, idx, offsets, EmbeddingBagMode::Sum, psw)));
  // float32 works too.
  const Tensor w32 = w.to(DType::Float32);
  CHECK(allclose(kernels::embedding_bag(w32, int64s(idx), int64s(offsets), EmbeddingBagMode::Mean),
                 ref_embedding_bag(w, idx, offsets, EmbeddingBagMode::Mean, {}), 1e-5, 1e-6));
  // No indices: every bag is empty; no bags and no indices: [0, D].
  CHECK(equal(kernels::embedding_bag(w, int64s({}), int64s({0, 0}), EmbeddingBagMode::Mean),
              zeros({2, 3}, DType::Float64)));
  CHECK(kernels::embedding_bag(w, int64s({}), int64s({}), EmbeddingBagMode::Sum).shape() ==
        Shape{0, 3});
}

TEST_CASE("kernels: embedding_bag backward pieces are adjoints of the forward", "[kernels]") {
  const Tensor w = random64({5, 3}, 41);
  const std::vector<int64_t> idx{4, 0, 2, 2, 1, 3};
  const std::vector<int64_t> offsets{0, 2, 2, 5};
  const Tensor psw = random64({6}, 42);
  const Tensor g = random64({4, 3}, 43);
  auto dot = [](const Tensor& x, const Tensor& y) {
    double s = 0;
    for (int64_t i = 0; i < x.numel(); ++i) s += x.get_flat(i) * y.get_flat(i);
    return s;
  };
  for (EmbeddingBagMode mode : {EmbeddingBagMode::Sum, EmbeddingBagMode::Mean}) {
    const Tensor scale = mode == EmbeddingBagMode::Sum ? psw : Tensor();
    const Tensor out = kernels::embedding_bag(w, int64s(idx), int64s(offsets), mode, scale);
    const Tensor gw = kernels::embedding_bag_weight_grad(g, int64s(idx), int64s(offsets), mode,
                                                         scale, 5);
    REQUIRE(gw.shape() == Shape{5, 3});
    // The forward is linear in the weight, so <out, g> == <w, d/dw>.
    CHECK(dot(out, g) == Approx(dot(w, gw)));
  }
  // ...and linear in the per-sample weights.
  const Tensor out = kernels::embedding_bag(w, int64s(idx), int64s(offsets),
                                            EmbeddingBagMode::Sum, psw);
  const Tensor gp = kernels::embedding_bag_per_sample_weights_grad(g, w, int64s(idx),
                                                                   int64s(offsets));
  REQUIRE(gp.shape() == Shape{6});
  CHECK(dot(out, g) == Approx(dot(psw, gp)));
  // Element 2 (index 2, bag 2) by hand.
  double e2 = 0;
  for (int64_t j = 0; j < 3; ++j) e2 += g.get_flat(2 * 3 + j) * w.get_flat(2 * 3 + j);
  CHECK(gp.get_flat(2) == Approx(e2));
}

TEST_CASE("kernels: embedding_bag rejects malformed bags", "[kernels]") {
  const Tensor w = zeros({5, 3});
  const auto mean = EmbeddingBagMode::Mean;
  const auto sum = EmbeddingBagMode::Sum;
  REQUIRE_THROWS_WITH(kernels::embedding_bag(w, int64s({1, 2}), int64s({1}), sum),
                      Contains("embedding_bag") && Contains("offsets[0] must be 0"));
  REQUIRE_THROWS_WITH(kernels::embedding_bag(w, int64s({1, 2}), int64s({0, 2, 1}), sum),
                      Contains("embedding_bag") && Contains("decrease"));
  REQUIRE_THROWS_WITH(kernels::embedding_bag(w, int64s({1, 2}), int64s({0, 3}), sum),
                      Contains("embedding_bag") && Contains("past the end"));
  REQUIRE_THROWS_WITH(kernels::embedding_bag(w, int64s({1, 5}), int64s({0}), sum),
                      Contains("embedding_bag") && Contains("index 5"));
  REQUIRE_THROWS_WITH(kernels::embedding_bag(w, int64s({1}), int64s({}), sum),
                      Contains("embedding_bag") && Contains("offsets is empty"));
  REQUIRE_THROWS_WITH(kernels::embedding_bag(w, int64s({1}), int64s({0}), mean, ones({1})),
                      Contains("embedding_bag") && Contains("per_sample_weights") &&
                          Contains("mean"));
  REQUIRE_THROWS_WITH(kernels::embedding_bag(w, int64s({1}), int64s({0}), sum, ones({2})),
                      Contains("embedding_bag") && Contains("[1]") && Contains("[2]"));
  REQUIRE_THROWS_WITH(
      kernels::embedding_bag(w, int64s({1}), int64s({0}), sum, ones({1}, DType::Float64)),
      Contains("embedding_bag") && Contains("float64"));
  REQUIRE_THROWS_WITH(kernels::embedding_bag(zeros({5}), int64s({1}), int64s({0}), sum),
                      Contains("embedding_bag") && Contains("[5]"));
  REQUIRE_THROWS_WITH(kernels::embedding_bag(w, from_vector(std::vector<int32_t>{1}),
                                             int64s({0}), sum),
                      Contains("embedding_bag") && Contains("indices") && Contains("int32"));
  REQUIRE_THROWS_WITH(kernels::embedding_bag(zeros({5, 3}, DType::Int32), int64s({1}),
                                             int64s({0}), sum),
                      Contains("embedding_bag: dtype int32 is not supported"));
  REQUIRE_THROWS_WITH(kernels::embedding_bag_weight_grad(zeros({2, 3}), int64s({1}), int64s({0}),
                                                         sum, Tensor(), 5),
                      Contains("embedding_bag") && Contains("[2, 3]"));
}

TEST_CASE("kernels: elementwise activations and their backward helpers", "[kernels]") {
  for (DType dtype : kFloatTypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor x = uniform({4, 5}, -3, 3, 51, dtype);
    const Tensor g = uniform({4, 5}, -1, 1, 52, dtype);
    CHECK(allclose(kernels::relu(x), ref_map(x, [](double v) { return v > 0 ? v : 0.0; })));
    CHECK(allclose(kernels::sigmoid(x), ref_map(x, [](double v) { return 1 / (1 + std::exp(-v)); }),
                   1e-6));
    CHECK(allclose(kernels::tanh(x), ref_map(x, [](double v) { return std::tanh(v); }), 1e-6));
    CHECK(allclose(kernels::exp(x), ref_map(x, [](double v) { return std::exp(v); }), 1e-6));
    const Tensor pos = uniform({4, 5}, 0.1, 3, 53, dtype);
    CHECK(allclose(kernels::log(pos), ref_map(pos, [](double v) { return std::log(v); }), 1e-6));
    CHECK(allclose(kernels::relu_backward(g, x),
                   ref_zip(g, x, [](double gg, double v) { return v > 0 ? gg : 0.0; })));
    const Tensor y = kernels::sigmoid(x);
    CHECK(allclose(kernels::sigmoid_backward(g, y),
                   ref_zip(g, y, [](double gg, double v) { return gg * v * (1 - v); }), 1e-5));
    const Tensor t = kernels::tanh(x);
    CHECK(allclose(kernels::tanh_backward(g, t),
                   ref_zip(g, t, [](double gg, double v) { return gg * (1 - v * v); }), 1e-5));
    CHECK(kernels::exp(zeros({0, 3}, dtype)).shape() == Shape{0, 3});
  }
  // Limits: no NaN from overflow, NaN propagates through relu, log(0) = -inf.
  const Tensor extreme = from_vector(std::vector<double>{-1000.0, 1000.0});
  CHECK(equal(kernels::sigmoid(extreme), from_vector(std::vector<double>{0.0, 1.0})));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(std::isnan(kernels::relu(from_vector(std::vector<double>{nan})).item()));
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(kernels::log(zeros({1}, DType::Float64)).item() == -inf);
  REQUIRE_THROWS_WITH(kernels::relu_backward(zeros({2}), zeros({3})),
                      Contains("relu") && Contains("[2]") && Contains("[3]"));
  REQUIRE_THROWS_WITH(kernels::tanh(zeros({2}, DType::Int32)), Contains("tanh: dtype int32"));
}

namespace {

Tensor ref_softmax(const Tensor& x, bool take_log) {
  const int64_t n = x.size(0), m = x.size(1);
  Tensor out = zeros(x.shape(), DType::Float64);
  for (int64_t i = 0; i < n; ++i) {
    double max = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < m; ++j) max = std::max(max, x.get_flat(i * m + j));
    double total = 0;
    for (int64_t j = 0; j < m; ++j) total += std::exp(x.get_flat(i * m + j) - max);
    for (int64_t j = 0; j < m; ++j) {
      const double shifted = x.get_flat(i * m + j) - max;
      out.set_flat(i * m + j, take_log ? shifted - std::log(total) : std::exp(shifted) / total);
    }
  }
  return out.to(x.dtype());
}

}  // namespace

TEST_CASE("kernels: softmax and log_softmax over rows", "[kernels]") {
  for (DType dtype : kFloatTypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor x = uniform({3, 4}, -5, 5, 61, dtype);
    CHECK(allclose(kernels::softmax(x), ref_softmax(x, false), 1e-5, 1e-7));
    CHECK(allclose(kernels::log_softmax(x), ref_softmax(x, true), 1e-5, 1e-6));
    // Large inputs do not overflow: the row maximum is subtracted first.
    const Tensor big = kernels::add(x, 1000.0);
    CHECK(allclose(kernels::softmax(big), kernels::softmax(x), 1e-4, 1e-6));
    CHECK(allclose(kernels::log_softmax(big), kernels::log_softmax(x), 1e-4, 1e-4));
  }
  const Tensor x = random64({3, 4}, 62);
  const Tensor g = random64({3, 4}, 63);
  // The backward helpers against the Jacobians written out element by element.
  const Tensor y = kernels::softmax(x);
  const Tensor gs = kernels::softmax_backward(g, y);
  const Tensor ly = kernels::log_softmax(x);
  const Tensor gl = kernels::log_softmax_backward(g, ly);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 4; ++j) {
      double ds = 0, dl = 0;
      for (int64_t k = 0; k < 4; ++k) {
        const double yk = y.get_flat(i * 4 + k), yj = y.get_flat(i * 4 + j);
        const double delta = j == k ? 1.0 : 0.0;
        ds += g.get_flat(i * 4 + k) * yk * (delta - yj);  // d y_k / d x_j
        dl += g.get_flat(i * 4 + k) * (delta - yj);       // d log y_k / d x_j
      }
      CHECK(gs.get_flat(i * 4 + j) == Approx(ds));
      CHECK(gl.get_flat(i * 4 + j) == Approx(dl));
    }
  }
  CHECK(kernels::softmax(zeros({0, 4})).shape() == Shape{0, 4});
  CHECK(kernels::log_softmax(zeros({2, 0})).shape() == Shape{2, 0});
  CHECK(kernels::softmax_backward(zeros({0, 4}), zeros({0, 4})).shape() == Shape{0, 4});
  REQUIRE_THROWS_WITH(kernels::softmax(zeros({4})), Contains("softmax") && Contains("[4]"));
  REQUIRE_THROWS_WITH(kernels::log_softmax(zeros({2, 3, 4})),
                      Contains("log_softmax") && Contains("[2, 3, 4]"));
  REQUIRE_THROWS_WITH(kernels::softmax_backward(zeros({2, 3}), zeros({3, 2})),
                      Contains("softmax") && Contains("[2, 3]") && Contains("[3, 2]"));
}

TEST_CASE("kernels: mse_loss and its gradients", "[kernels]") {
  for (DType dtype : kFloatTypes) {
    const Tensor x = uniform({3, 4}, -2, 2, 71, dtype);
    const Tensor t = uniform({3, 4}, -2, 2, 72, dtype);
    const Tensor sq = ref_zip(x, t, [](double a, double b) { return (a - b) * (a - b); });
    double total = 0;
    for (int64_t i = 0; i < 12; ++i) total += sq.get_flat(i);
    CHECK(allclose(kernels::mse_loss(x, t, Reduction::None), sq, 1e-6));
    CHECK(kernels::mse_loss(x, t, Reduction::Sum).item() == Approx(total).epsilon(1e-5));
    CHECK(kernels::mse_loss(x, t).item() == Approx(total / 12).epsilon(1e-5));
    CHECK(kernels::mse_loss(x, t).dim() == 0);
    const Tensor g = uniform({3, 4}, -1, 1, 73, dtype);
    CHECK(allclose(kernels::mse_loss_backward(g, x, t, Reduction::None),
                   ref_zip(kernels::sub(x, t), g, [](double d, double gg) { return 2 * d * gg; }),
                   1e-5));
    const Tensor half = full({}, 0.5, dtype);
    CHECK(allclose(kernels::mse_loss_backward(half, x, t, Reduction::Sum),
                   ref_zip(x, t, [](double a, double b) { return (a - b); }), 1e-5));
    CHECK(allclose(kernels::mse_loss_backward(half, x, t, Reduction::Mean),
                   ref_zip(x, t, [](double a, double b) { return (a - b) / 12; }), 1e-5));
  }
  CHECK(std::isnan(kernels::mse_loss(zeros({0}), zeros({0})).item()));
  CHECK(kernels::mse_loss(zeros({0}), zeros({0}), Reduction::Sum).item() == 0.0);
  REQUIRE_THROWS_WITH(kernels::mse_loss(zeros({2, 3}), zeros({3, 2})),
                      Contains("mse_loss") && Contains("[2, 3]") && Contains("[3, 2]"));
  REQUIRE_THROWS_WITH(kernels::mse_loss_backward(zeros({2}), zeros({2, 3}), zeros({2, 3}),
                                                 Reduction::None),
                      Contains("mse_loss") && Contains("[2]") && Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(kernels::mse_loss_backward(zeros({2}), zeros({2}), zeros({2}),
                                                 Reduction::Mean),
                      Contains("mse_loss") && Contains("0-d"));
  REQUIRE_THROWS_WITH(kernels::mse_loss(zeros({2}, DType::Int64), zeros({2}, DType::Int64)),
                      Contains("mse_loss: dtype int64 is not supported"));
}

TEST_CASE("kernels: binary_cross_entropy_with_logits and its gradients", "[kernels]") {
  auto naive = [](double x, double t) {
    const double s = 1 / (1 + std::exp(-x));
    return -(t * std::log(s) + (1 - t) * std::log(1 - s));
  };
  for (DType dtype : kFloatTypes) {
    const Tensor x = uniform({2, 5}, -4, 4, 81, dtype);
    const Tensor t = uniform({2, 5}, 0, 1, 82, dtype);
    const Tensor l = ref_zip(x, t, naive);
    double total = 0;
    for (int64_t i = 0; i < 10; ++i) total += l.get_flat(i);
    CHECK(allclose(kernels::binary_cross_entropy_with_logits(x, t, Reduction::None), l, 1e-5));
    CHECK(kernels::binary_cross_entropy_with_logits(x, t, Reduction::Sum).item() ==
          Approx(total).epsilon(1e-5));
    CHECK(kernels::binary_cross_entropy_with_logits(x, t).item() ==
          Approx(total / 10).epsilon(1e-5));
    const Tensor one = full({}, 1.0, dtype);
    CHECK(allclose(
        kernels::binary_cross_entropy_with_logits_backward(one, x, t, Reduction::Mean),
        ref_zip(x, t, [](double a, double b) { return (1 / (1 + std::exp(-a)) - b) / 10; }),
        1e-5, 1e-7));
    CHECK(allclose(
        kernels::binary_cross_entropy_with_logits_target_backward(one, x, Reduction::Sum),
        ref_map(x, [](double a) { return -a; })));
    const Tensor g = uniform({2, 5}, -1, 1, 83, dtype);
    CHECK(allclose(
        kernels::binary_cross_entropy_with_logits_target_backward(g, x, Reduction::None),
        ref_zip(x, g, [](double a, double gg) { return -a * gg; }), 1e-6));
  }
  // Where the naive formula overflows the stable one is exact: loss(100, 0) = 100.
  const Tensor x = from_vector(std::vector<double>{100.0, -100.0, 0.0});
  const Tensor t = from_vector(std::vector<double>{0.0, 1.0, 0.5});
  const Tensor l = kernels::binary_cross_entropy_with_logits(x, t, Reduction::None);
  CHECK(l.get_flat(0) == Approx(100.0));
  CHECK(l.get_flat(1) == Approx(100.0));
  CHECK(l.get_flat(2) == Approx(std::log(2.0)));
  REQUIRE_THROWS_WITH(kernels::binary_cross_entropy_with_logits(zeros({2}), zeros({3})),
                      Contains("binary_cross_entropy_with_logits") && Contains("[2]") &&
                          Contains("[3]"));
}
