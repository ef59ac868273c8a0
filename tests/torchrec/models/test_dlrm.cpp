// DLRM pieces: Linear / Mlp, the three arches against hand-computed numbers and naive loops,
// gradcheck of the interaction and of the whole dense path (float64), the pluggable sparse arch (a
// stand-in embedding lookup written here: the real EmbeddingBagCollection plugs in the same way),
// bce_with_logits, and a few SGD steps that learn.
#include <ferry/autograd/grad_mode.h>
#include <ferry/autograd/gradcheck.h>
#include <ferry/autograd/ops.h>
#include <ferry/autograd/optimizer.h>
#include <ferry/collectives/torchrec/torchrec.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec;
using Catch::Matchers::Contains;

namespace {

void set_values(const Variable& v, const std::vector<double>& values) {
  REQUIRE(v.numel() == static_cast<int64_t>(values.size()));
  Tensor t = v.value();
  for (size_t i = 0; i < values.size(); ++i) t.set_flat(static_cast<int64_t>(i), values[i]);
}

std::vector<double> to_doubles(const Tensor& t) {
  std::vector<double> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(t.get_flat(i));
  return out;
}

// A stand-in sparse arch: one table per feature, sum pooling, written with embedding_bag.
struct StandInTables {
  std::vector<Variable> tables;  // [rows, D] each
  std::vector<std::string> keys;

  StandInTables(int64_t features, int64_t rows, int64_t dim, uint64_t seed, DType dtype) {
    for (int64_t f = 0; f < features; ++f) {
      tables.emplace_back(normal({rows, dim}, 0.0, 0.5, seed + static_cast<uint64_t>(f), dtype),
                          true, std::string("table").append(std::to_string(f)));
      keys.push_back(std::string("f").append(std::to_string(f)));
    }
  }
  Variable lookup(const KeyedJaggedTensor& kjt, const std::vector<Variable>& weights) const {
    std::vector<Variable> pooled;
    for (size_t f = 0; f < keys.size(); ++f) {
      const JaggedTensor jt = kjt[keys[f]];
      pooled.push_back(embedding_bag(weights[f], jt.values(), jt.offsets().narrow(0, 0, kjt.stride())));
    }
    return cat(pooled, 1);
  }
};

// Two features, batch 3, ids < 5; sample 1 has an empty bag in f1.
KeyedJaggedTensor small_kjt(int64_t features = 2) {
  std::vector<int64_t> values, lengths;
  for (int64_t f = 0; f < features; ++f) {
    const std::vector<std::vector<int64_t>> bags = {{0, 3}, f == 1 ? std::vector<int64_t>{}
                                                                   : std::vector<int64_t>{4},
                                                    {(1 + f) % 5, 2, 2}};
    for (const auto& bag : bags) {
      values.insert(values.end(), bag.begin(), bag.end());
      lengths.push_back(static_cast<int64_t>(bag.size()));
    }
  }
  std::vector<std::string> keys;
  for (int64_t f = 0; f < features; ++f) keys.push_back(std::string("f").append(std::to_string(f)));
  return KeyedJaggedTensor::from_lengths_sync(keys, from_vector<int64_t>(values),
                                              from_vector<int64_t>(lengths));
}

}  // namespace

TEST_CASE("Linear and Mlp: layout, seeded init, hand-computed forward", "[dlrm]") {
  const Linear a(3, 2, 5), b(3, 2, 5), c(3, 2, 6);
  CHECK(a.weight().shape() == Shape{2, 3});
  CHECK(a.bias().shape() == Shape{2});
  CHECK(equal(a.weight().value(), b.weight().value()));
  CHECK_FALSE(equal(a.weight().value(), c.weight().value()));
  for (double w : to_doubles(a.weight().value())) CHECK(std::abs(w) <= 1 / std::sqrt(3.0));

  // Dense arch 2 -> 2 with ReLU: W = [[1, -1], [0.5, 2]], b = [0, -1], x = [1, 2]:
  // W x + b = [-1, 3.5] -> [0, 3.5].
  DenseArch dense(2, {2}, 1, DType::Float64);
  set_values(dense.mlp().layers()[0].weight(), {1, -1, 0.5, 2});
  set_values(dense.mlp().layers()[0].bias(), {0, -1});
  const Tensor h = dense.forward(Variable(from_vector<double>({1, 2}, {1, 2}))).value();
  CHECK(to_doubles(h) == std::vector<double>{0, 3.5});
  // Over arch 2 -> 2 -> 1: ReLU between, none on the logit (which is negative here).
  OverArch over(2, {2, 1}, 2, DType::Float64);
  set_values(over.mlp().layers()[0].weight(), {1, 0, 0, 1});
  set_values(over.mlp().layers()[0].bias(), {0, 0});
  set_values(over.mlp().layers()[1].weight(), {1, -1});
  set_values(over.mlp().layers()[1].bias(), {0.5});
  // x = [-1, 3]: layer 1 gives relu([-1, 3]) = [0, 3]; logit = 0 - 3 + 0.5 = -2.5.
  const Tensor logit = over.forward(Variable(from_vector<double>({-1, 3}, {1, 2}))).value();
  REQUIRE(logit.shape() == Shape{1, 1});
  CHECK(logit.item() == -2.5);
  // ReLU'(0) = 0: a unit exactly at 0 passes no gradient to its weights.
  Variable x(from_vector<double>({1, 2}, {1, 2}));
  set_values(dense.mlp().layers()[0].weight(), {2, -1, 0.5, 2});  // row 0 gives exactly 0
  backward(sum(dense.forward(x)));
  const std::vector<double> gw = to_doubles(dense.mlp().layers()[0].weight().grad());
  CHECK(gw == std::vector<double>{0, 0, 1, 2});

  CHECK_THROWS_WITH(dense.forward(Variable(zeros({1, 3}, DType::Float64))),
                    Contains("dense_arch.0") && Contains("[1, 3]"));
  CHECK_THROWS_WITH(OverArch(4, {3, 2}, 0), Contains("last layer size must be 1"));
  CHECK_THROWS_WITH(Mlp(4, {}, 0), Contains("at least one layer"));
}

TEST_CASE("InteractionArch: pairs in row-major order, hand-computed values", "[dlrm]") {
  const InteractionArch inter(2, 2);
  CHECK(inter.out_features() == 2 + 3);
  CHECK(inter.pair_indices().to_vector<int64_t>() == std::vector<int64_t>{1, 2, 5});
  CHECK(InteractionArch(3, 1).pair_indices().to_vector<int64_t>() ==
        std::vector<int64_t>{1, 2, 3, 6, 7, 11});
  // X rows (1, 2), (3, 4), (5, 6): <0,1> = 11, <0,2> = 17, <1,2> = 39.
  const Variable dense(from_vector<double>({1, 2, -1, 0}, {2, 2}));
  const Variable sparse(from_vector<double>({3, 4, 5, 6, 1, 1, 2, -3}, {2, 4}));
  const Tensor y = inter.forward(dense, sparse).value();
  REQUIRE(y.shape() == Shape{2, 5});
  // Sample 1: rows (-1, 0), (1, 1), (2, -3): -1, -2, 2 - 3 = -1.
  CHECK(to_doubles(y) == std::vector<double>{1, 2, 11, 17, 39, -1, 0, -1, -2, -1});

  // Gradients to both inputs (float64 finite differences), including a batch of 1 and F = 1.
  for (auto [f, d, b] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {3, 2, 2}, {1, 4, 1}, {4, 3, 3}}) {
    CAPTURE(f, d, b);
    const InteractionArch arch(f, d);
    const GradcheckResult r = gradcheck(
        [&](const std::vector<Variable>& in) {
          return std::vector<Variable>{arch.forward(in[0], in[1])};
        },
        {normal({b, d}, 0, 1, 3, DType::Float64), normal({b, f * d}, 0, 1, 4, DType::Float64)});
    INFO(r.message);
    CHECK(r.ok);
    CHECK(r.elements_checked == b * d + b * f * d);
  }
  CHECK_THROWS_WITH(inter.forward(dense, Variable(zeros({2, 6}, DType::Float64))),
                    Contains("InteractionArch") && Contains("[2, 6]") && Contains("[B, 4]"));
}

TEST_CASE("dot_interaction: equals X X^T's upper triangle by bmm; more than one register of "
          "pairs and of dims", "[dlrm]") {
  // The kernels work in chunks of 16 pairs and 16 dims: F = 20 (21 rows) and D = 18 spill into a
  // second chunk of each; F = 26, D = 16 is the DLRM's shape.
  for (auto [f, d, b] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {20, 18, 3}, {26, 16, 5}, {1, 1, 2}}) {
    CAPTURE(f, d, b);
    const Tensor dense = normal({b, d}, 0, 1, 7, DType::Float64);
    const Tensor sparse = normal({b, f * d}, 0, 1, 8, DType::Float64);
    // The unfused formulation: stack, batched product, pick the pairs.
    const InteractionArch arch(f, d);
    const Variable x = reshape(cat({Variable(dense), Variable(sparse)}, 1), {b, f + 1, d});
    const Variable z = bmm(x, transpose(x, 1, 2));
    const Variable upper = index_select(reshape(z, {b, (f + 1) * (f + 1)}), 1,
                                        arch.pair_indices());
    const Tensor expected = cat({Variable(dense), upper}, 1).value();
    CHECK(allclose(dot_interaction(Variable(dense), Variable(sparse), f).value(), expected,
                   1e-12, 1e-12));
    const GradcheckResult r = gradcheck(
        // f by value: clang before 16 (the sanitizer builds') cannot capture a structured binding.
        [&, f = f](const std::vector<Variable>& in) {
          return std::vector<Variable>{dot_interaction(in[0], in[1], f)};
        },
        {dense, sparse});
    INFO(r.message);
    CHECK(r.ok);
  }
  // float32 runs the same kernels.
  const Tensor d32 = normal({4, 16}, 0, 1, 9), s32 = normal({4, 26 * 16}, 0, 1, 10);
  const Tensor y64 = dot_interaction(Variable(d32.to(DType::Float64)),
                                     Variable(s32.to(DType::Float64)), 26).value();
  CHECK(allclose(dot_interaction(Variable(d32), Variable(s32), 26).value().to(DType::Float64),
                 y64, 1e-5, 1e-5));
  CHECK_THROWS_WITH(dot_interaction(Variable(d32), Variable(s32), 25),
                    Contains("dot_interaction") && Contains("[4, 416]"));
}

TEST_CASE("dot_interaction: float32 sums each value from zero in ascending order with fused "
          "multiply-adds, forward and backward, whatever the batch", "[dlrm]") {
  // The float kernels take eight samples at a time when D is a multiple of 8 and one sample's
  // rows at a time otherwise; both must give these bits. Batches of 1, 13 and 19 leave a partial
  // group of eight; D = 24 and 32 take more than one register of values, F = 1 a single pair.
  for (const auto& shape : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {26, 16, 13}, {20, 24, 19}, {8, 32, 9}, {1, 8, 1}, {5, 12, 11}}) {
    // Plain variables: clang before 16 (the sanitizer builds') cannot capture a structured
    // binding in a lambda.
    const int64_t f = std::get<0>(shape), d = std::get<1>(shape), b = std::get<2>(shape);
    CAPTURE(f, d, b);
    const int64_t n = f + 1, width = d + n * (n - 1) / 2;
    const Tensor dense = normal({b, d}, 0, 1, 21), sparse = normal({b, f * d}, 0, 1, 22);
    const Tensor grad = normal({b, width}, 0, 1, 23);
    auto x = [&](int64_t s, int64_t k, int64_t v) {
      return k == 0 ? dense.data<float>()[s * d + v]
                    : sparse.data<float>()[(s * f + k - 1) * d + v];
    };
    std::vector<float> out(static_cast<size_t>(b * width)), dx(static_cast<size_t>(b * n * d));
    for (int64_t s = 0; s < b; ++s) {
      float* o = out.data() + s * width;
      for (int64_t v = 0; v < d; ++v) o[v] = x(s, 0, v);
      std::vector<float> pair_grad(static_cast<size_t>(n * n), 0.0f);
      int64_t p = d;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = i + 1; j < n; ++j, ++p) {
          float acc = 0.0f;
          for (int64_t v = 0; v < d; ++v) acc = std::fma(x(s, i, v), x(s, j, v), acc);
          o[p] = acc;
          pair_grad[static_cast<size_t>(i * n + j)] = grad.data<float>()[s * width + p];
          pair_grad[static_cast<size_t>(j * n + i)] = grad.data<float>()[s * width + p];
        }
      }
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t v = 0; v < d; ++v) {
          float acc = 0.0f;
          for (int64_t j = 0; j < n; ++j) {
            if (j != i) acc = std::fma(pair_grad[static_cast<size_t>(i * n + j)], x(s, j, v), acc);
          }
          // The dense output's gradient adds its pass-through columns' gradient.
          dx[static_cast<size_t>((s * n + i) * d + v)] =
              i == 0 ? grad.data<float>()[s * width + v] + acc : acc;
        }
      }
    }
    const Variable dv(dense, true), sv(sparse, true);
    const Variable y = dot_interaction(dv, sv, f);
    backward(y, grad);
    // Values that differ at all, and values that differ by more than rounding.
    int64_t differ = 0, far = 0;
    auto compare = [&](float got, float want) {
      differ += got != want ? 1 : 0;
      far += std::abs(got - want) > 1e-4f * (1.0f + std::abs(want)) ? 1 : 0;
    };
    for (int64_t k = 0; k < b * width; ++k)
      compare(y.value().data<float>()[k], out[static_cast<size_t>(k)]);
    for (int64_t s = 0; s < b; ++s) {
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t v = 0; v < d; ++v) {
          const float got = i == 0 ? dv.grad().data<float>()[s * d + v]
                                   : sv.grad().data<float>()[(s * f + i - 1) * d + v];
          compare(got, dx[static_cast<size_t>((s * n + i) * d + v)]);
        }
      }
    }
    CHECK(far == 0);
#if defined(__FMA__)
    // Built with fused multiply-add instructions (the default build's -march=native here): the
    // kernels' sums are the reference's, bit for bit.
    CHECK(differ == 0);
#endif
  }
}

TEST_CASE("DLRM: forward equals a naive reference; gradcheck of the whole dense path",
          "[dlrm]") {
  const int64_t features = 2, dim = 2, rows = 5;
  StandInTables tables(features, rows, dim, 40, DType::Float64);
  std::vector<Variable> live = tables.tables;  // what the stand-in reads (gradcheck swaps it)
  SparseArch sparse(tables.keys, dim, [&](const KeyedJaggedTensor& kjt) {
    return tables.lookup(kjt, live);
  });
  const DLRM model(sparse, {.dense_in_features = 3, .dense_arch_layer_sizes = {4, 2},
                            .over_arch_layer_sizes = {3, 1}, .seed = 9, .dtype = DType::Float64});
  CHECK(model.dense_parameters().size() == 8);
  const KeyedJaggedTensor kjt = small_kjt();
  const Tensor dense = normal({3, 3}, 0, 1, 11, DType::Float64);
  const Tensor logits = model.forward(Variable(dense), kjt).value();
  REQUIRE(logits.shape() == Shape{3});

  // Naive reference: loops over every layer with the model's own parameter values.
  auto linear = [](const Linear& l, const std::vector<double>& x, bool relu_after) {
    std::vector<double> y(static_cast<size_t>(l.out_features()));
    for (int64_t o = 0; o < l.out_features(); ++o) {
      double acc = l.bias().value().get_flat(o);
      for (int64_t i = 0; i < l.in_features(); ++i) {
        acc += l.weight().value().get_flat(o * l.in_features() + i) * x[static_cast<size_t>(i)];
      }
      y[static_cast<size_t>(o)] = relu_after ? std::max(acc, 0.0) : acc;
    }
    return y;
  };
  const std::vector<std::vector<std::vector<int64_t>>> bags = {
      {{0, 3}, {4}, {1, 2, 2}}, {{0, 3}, {}, {2, 2, 2}}};  // [feature][sample]
  for (int64_t s = 0; s < 3; ++s) {
    std::vector<double> x = {dense.get_flat(s * 3), dense.get_flat(s * 3 + 1),
                             dense.get_flat(s * 3 + 2)};
    for (const Linear& l : model.dense_arch().mlp().layers()) x = linear(l, x, true);
    std::vector<std::vector<double>> rows_of_x = {x};
    for (int64_t f = 0; f < features; ++f) {
      std::vector<double> e(dim, 0.0);
      for (int64_t id : bags[static_cast<size_t>(f)][static_cast<size_t>(s)]) {
        for (int64_t k = 0; k < dim; ++k) {
          e[static_cast<size_t>(k)] += tables.tables[static_cast<size_t>(f)].value().get_flat(id * dim + k);
        }
      }
      rows_of_x.push_back(e);
    }
    std::vector<double> z = x;
    for (size_t i = 0; i < rows_of_x.size(); ++i) {
      for (size_t j = i + 1; j < rows_of_x.size(); ++j) {
        double dot = 0;
        for (int64_t k = 0; k < dim; ++k) dot += rows_of_x[i][static_cast<size_t>(k)] * rows_of_x[j][static_cast<size_t>(k)];
        z.push_back(dot);
      }
    }
    const auto& over_layers = model.over_arch().mlp().layers();
    for (size_t l = 0; l < over_layers.size(); ++l) z = linear(over_layers[l], z, l + 1 < over_layers.size());
    CHECK(logits.get_flat(s) == Approx(z[0]).epsilon(1e-12));
  }

  // Gradcheck over the dense features and the embedding tables (through the stand-in).
  const Tensor labels = from_vector<double>({1, 0, 1});
  const GradcheckResult r = gradcheck(
      [&](const std::vector<Variable>& in) {
        live = {in[1], in[2]};
        return std::vector<Variable>{bce_with_logits(model.forward(in[0], kjt), labels)};
      },
      {dense, tables.tables[0].value().clone(), tables.tables[1].value().clone()});
  INFO(r.message);
  CHECK(r.ok);
  CHECK(r.elements_checked == 9 + 2 * rows * dim);
  live = tables.tables;

  // Every dense parameter: backward's gradient against central differences of the loss.
  auto loss_value = [&] {
    NoGradGuard no_grad;
    return bce_with_logits(model.forward(Variable(dense), kjt), labels).value().item();
  };
  // (gradcheck's backward passes left weighted gradients in the parameters: start from none.)
  for (Variable p : model.dense_parameters()) p.zero_grad();
  backward(bce_with_logits(model.forward(Variable(dense), kjt), labels));
  int64_t checked = 0;
  for (const Variable& p : model.dense_parameters()) {
    const Tensor grad = p.grad().clone();
    Tensor value = p.value();
    for (int64_t i = 0; i < p.numel(); ++i) {
      const double saved = value.get_flat(i);
      value.set_flat(i, saved + 1e-6);
      const double up = loss_value();
      value.set_flat(i, saved - 1e-6);
      const double down = loss_value();
      value.set_flat(i, saved);
      CAPTURE(p.name(), i);
      CHECK(grad.get_flat(i) == Approx((up - down) / 2e-6).margin(1e-7).epsilon(1e-4));
      ++checked;
    }
  }
  CHECK(checked == (3 * 4 + 4) + (4 * 2 + 2) + (5 * 3 + 3) + (3 * 1 + 1));
}

namespace {
struct KeyedOut {  // the shape of the EmbeddingBagCollection's pooled output
  std::vector<std::string> keys;
  std::vector<int64_t> length_per_key;
  Variable values;
};
}  // namespace

TEST_CASE("SparseArch: keyed outputs plug in; mismatches are named", "[dlrm]") {
  StandInTables tables(2, 5, 3, 50, DType::Float32);
  SparseArch keyed(tables.keys, 3, [&](const KeyedJaggedTensor& kjt) {
    return KeyedOut{tables.keys, {3, 3}, tables.lookup(kjt, tables.tables)};
  });
  const SparseArchOutput out = keyed.forward(small_kjt());
  CHECK(out.values.shape() == Shape{3, 6});
  CHECK(out.keyed_tensor().keys() == tables.keys);
  CHECK(equal(out.keyed_tensor()["f1"], out.values.value().narrow_copy(1, 3, 3)));

  SparseArch wrong_keys({"f1", "f0"}, 3, [&](const KeyedJaggedTensor& kjt) {
    return KeyedOut{tables.keys, {3, 3}, tables.lookup(kjt, tables.tables)};
  });
  CHECK_THROWS_WITH(wrong_keys.forward(small_kjt()),
                    Contains(R"(["f0", "f1"])") && Contains(R"(["f1", "f0"])"));
  SparseArch wrong_dim(tables.keys, 3, [&](const KeyedJaggedTensor& kjt) {
    return KeyedOut{tables.keys, {3, 4}, tables.lookup(kjt, tables.tables)};
  });
  CHECK_THROWS_WITH(wrong_dim.forward(small_kjt()), Contains("'f1' has dim 4"));
  SparseArch wrong_width(tables.keys, 2, [&](const KeyedJaggedTensor& kjt) {
    return tables.lookup(kjt, tables.tables);
  });
  CHECK_THROWS_WITH(wrong_width.forward(small_kjt()), Contains("[3, 4]") && Contains("[3, 6]"));
  CHECK_THROWS_WITH(DLRM(keyed, {.dense_in_features = 3, .dense_arch_layer_sizes = {4},
                                 .over_arch_layer_sizes = {1}}),
                    Contains("dense arch's last layer size (4)"));
  const DLRM model(keyed, {.dense_in_features = 3, .dense_arch_layer_sizes = {3},
                           .over_arch_layer_sizes = {1}});
  CHECK_THROWS_WITH(model.forward(Variable(zeros({2, 3})), small_kjt()),
                    Contains("[2, 3]") && Contains("stride 3"));
}

TEST_CASE("bce_with_logits: hand-computed mean, stable at large logits, gradient", "[dlrm]") {
  Variable x(from_vector<double>({0, 2, -3}), true);
  const Tensor t = from_vector<double>({1, 0, 1});
  Variable loss = bce_with_logits(x, t);
  const double expected = (std::log(2.0) + (2 + std::log1p(std::exp(-2.0))) +
                           (3 + std::log1p(std::exp(-3.0)))) / 3;
  CHECK(loss.value().item() == Approx(expected).epsilon(1e-12));
  backward(loss);
  auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
  CHECK(x.grad().get_flat(0) == Approx((sig(0) - 1) / 3));
  CHECK(x.grad().get_flat(1) == Approx(sig(2) / 3));
  CHECK(x.grad().get_flat(2) == Approx((sig(-3) - 1) / 3));
  const double big = bce_with_logits(Variable(from_vector<float>({1000, -1000})),
                                     from_vector<float>({0, 1})).value().item();
  CHECK(big == Approx(1000));
  CHECK_THROWS_WITH(bce_with_logits(x, from_vector<double>({1, 0})),
                    Contains("[3]") && Contains("[2]"));
}

TEST_CASE("DLRM on synthetic data: a few SGD steps lower the training loss", "[dlrm]") {
  SyntheticCriteo data({.num_sparse = 3, .cardinalities = {50, 80, 100}, .num_train = 2048,
                        .num_test = 256, .seed = 3});
  std::vector<Variable> tables;
  const std::vector<std::string> keys = criteo_sparse_keys(3);
  for (int64_t t = 0; t < 3; ++t) {
    tables.emplace_back(normal({data.config().cardinalities[static_cast<size_t>(t)], 4}, 0, 0.1,
                               70 + static_cast<uint64_t>(t)), true);
  }
  SparseArch sparse(keys, 4, [&](const KeyedJaggedTensor& kjt) {
    std::vector<Variable> pooled;
    for (size_t t = 0; t < keys.size(); ++t) {
      const JaggedTensor jt = kjt[keys[t]];
      pooled.push_back(embedding_bag(tables[t], jt.values(), jt.offsets().narrow(0, 0, kjt.stride()),
                                     EmbeddingBagMode::Mean));
    }
    return cat(pooled, 1);
  });
  const DLRM model(sparse, {.dense_in_features = 13, .dense_arch_layer_sizes = {16, 4},
                            .over_arch_layer_sizes = {8, 1}, .seed = 1});
  std::vector<Variable> params = model.dense_parameters();
  params.insert(params.end(), tables.begin(), tables.end());
  Sgd sgd(params, SgdOptions{.lr = 0.1, .momentum = 0.9});
  const Batch eval = data.batch(Split::Train, 0, 512);
  auto eval_loss = [&] {
    NoGradGuard no_grad;
    return bce_with_logits(model.forward(Variable(eval.dense), eval.sparse), eval.labels)
        .value().item();
  };
  const double before = eval_loss();
  SyntheticCriteoSource source(data, Split::Train, {.batch_size = 64});
  for (int epoch = 0; epoch < 3; ++epoch) {
    source.reset();
    while (auto batch = source.next_batch()) {
      backward(bce_with_logits(model.forward(Variable(batch->dense), batch->sparse), batch->labels));
      sgd.step();
      sgd.zero_grad();
    }
  }
  const double after = eval_loss();
  CAPTURE(before, after);
  CHECK(after < before - 0.05);
}
