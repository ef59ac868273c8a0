// The unsharded embedding modules: configs and their validation, EmbeddingBagCollection and
// EmbeddingCollection forward values against hand-computed numbers, id bounds checks, sparse
// gradients (touched rows only, duplicates accumulated) and gradchecks of tables and weights.
#include <ferry/collectives/torchrec/torchrec.h>
#include "embedding_test_util.h"
#include "tests/torchrec/jagged_test_util.h"

#include <ferry/autograd/gradcheck.h>

#include <catch2/catch.hpp>

using namespace ferry;
using namespace ferry::torchrec;
using namespace ferry::torchrec::testing;
using Catch::Matchers::Contains;

namespace {

std::vector<double> row(const Tensor& t, int64_t r) {
  std::vector<double> out;
  for (int64_t c = 0; c < t.size(1); ++c) out.push_back(t.get_flat(r * t.size(1) + c));
  return out;
}

}  // namespace

TEST_CASE("EmbeddingBagCollection: SUM / MEAN, empty bags, a table serving two features, "
          "ignored keys", "[embedding_modules]") {
  EmbeddingBagCollection ebc(example_tables());
  set_example_weights(ebc);
  PooledEmbeddings out = ebc.forward(example_kjt(/*weighted=*/true));  // weights ignored
  CHECK(out.keys == std::vector<std::string>{"f0", "f1", "g"});
  CHECK(out.length_per_key == V{2, 2, 3});
  REQUIRE(out.values.shape() == Shape{3, 7});
  const Tensor& v = out.values.value();
  // f0: E1 + E3 | f1: E4 | g: (G0 + 2 G2) / 3
  CHECK(row(v, 0) == std::vector<double>{4, 24, 4, 14, 7.0 / 3, 14.0 / 3, 21.0 / 3});
  // f0: empty | f1: 2 E0 | g: G1
  CHECK(row(v, 1) == std::vector<double>{0, 0, 0, 20, 2, 4, 6});
  // f0: E2 | f1: empty | g: empty MEAN bag gives zeros
  CHECK(row(v, 2) == std::vector<double>{2, 12, 0, 0, 0, 0, 0});
  KeyedTensor kt = out.keyed_tensor();
  CHECK(dv(kt["f1"]) == std::vector<double>{4, 14, 0, 20, 0, 0});
  CHECK(!ebc.table("t0")->weight().grad().defined());
}

TEST_CASE("EmbeddingBagCollection: weighted SUM and fbgemm's weighted MEAN",
          "[embedding_modules]") {
  EmbeddingBagCollection ebc(example_tables(), /*is_weighted=*/true);
  set_example_weights(ebc);
  const Tensor v = ebc.forward(example_kjt(true)).values.value();
  // f0: 0.5 E1 + 2 E3 | f1: -E4 | g: (G0 + 0.25 G2 + 0.5 G2) / 3
  CHECK(row(v, 0) == std::vector<double>{6.5, 31.5, -4, -14, 3.25 / 3, 6.5 / 3, 9.75 / 3});
  // f0: empty | f1: 1 E0 + 3 E0 | g: 4 G1 / 1
  CHECK(row(v, 1) == std::vector<double>{0, 0, 0, 40, 8, 16, 24});
  CHECK(row(v, 2) == std::vector<double>{3, 18, 0, 0, 0, 0, 0});

  // float32 weights with float64 tables are converted.
  const Tensor v32 = ebc.forward(example_kjt(true, DType::Float32)).values.value();
  CHECK(equal(v32, v));
  CHECK_THROWS_WITH(ebc.forward(example_kjt(false)),
                    Contains("the collection is weighted but the KJT has no weights"));
}

TEST_CASE("EmbeddingBagCollection: missing features, bad ids and bounds-check modes",
          "[embedding_modules]") {
  EmbeddingBagCollection ebc(example_tables());
  set_example_weights(ebc);
  auto kjt_no_g = KeyedJaggedTensor::from_lengths_sync(
      {"f0", "f1"}, from_vector<int64_t>({1, 2}), from_vector<int64_t>({1, 0, 0, 1}));
  CHECK_THROWS_WITH(ebc.forward(kjt_no_g),
                    Contains("feature \"g\" is configured but missing from the KJT's keys "
                             "[\"f0\", \"f1\"]"));
  // f1 sample 1 holds id 5 of a 5-row table
  auto bad = KeyedJaggedTensor::from_lengths_sync(
      {"f0", "f1", "g"}, from_vector<int64_t>({1, 0, 5, 2}),
      from_vector<int64_t>({1, 0, 1, 1, 1, 0}));
  CHECK_THROWS_WITH(ebc.forward(bad), Contains("id 5 of feature \"f1\" (sample 1) is out of "
                                               "range for table \"t0\" of 5 rows"));
  ebc.set_bounds_check_mode(BoundsCheckMode::Clip);  // 5 -> 4
  CHECK(row(ebc.forward(bad).values.value(), 1) == std::vector<double>{0, 0, 4, 14, 0, 0, 0});
  ebc.set_bounds_check_mode(BoundsCheckMode::Warning);  // 5 -> 0, with a warning
  CHECK(row(ebc.forward(bad).values.value(), 1) == std::vector<double>{0, 0, 0, 10, 0, 0, 0});
  auto negative = KeyedJaggedTensor::from_lengths_sync(
      {"f0", "f1", "g"}, from_vector<int64_t>({-1}), from_vector<int64_t>({0, 0, 0, 0, 1, 0}));
  ebc.set_bounds_check_mode(BoundsCheckMode::Fatal);
  CHECK_THROWS_WITH(ebc.forward(negative), Contains("id -1 of feature \"g\" (sample 0) is out "
                                                    "of range for table \"t1\" of 3 rows"));
}

TEST_CASE("embedding configs: validation messages and seeded init", "[embedding_modules]") {
  auto t = example_tables();
  auto dup = t;
  dup[1].name = "t0";
  CHECK_THROWS_WITH(EmbeddingBagCollection(dup),
                    Contains("table name \"t0\" is used by two tables"));
  auto shared = t;
  shared[1].feature_names = {"g", "f1"};
  CHECK_THROWS_WITH(EmbeddingBagCollection(shared),
                    Contains("feature \"f1\" is in table \"t0\" and in table \"t1\""));
  auto zero = t;
  zero[0].num_embeddings = 0;
  CHECK_THROWS_WITH(EmbeddingBagCollection(zero),
                    Contains("table \"t0\": num_embeddings must be >= 1, got 0"));
  auto nofeat = t;
  nofeat[1].feature_names = {};
  CHECK_THROWS_WITH(EmbeddingBagCollection(nofeat), Contains("table \"t1\": no feature_names"));
  auto ints = t;
  ints[0].data_type = DType::Int64;
  CHECK_THROWS_WITH(EmbeddingBagCollection(ints), Contains("data_type must be float32 or float64"));
  CHECK_THROWS_WITH(
      EmbeddingCollection({{.name = "a", .num_embeddings = 3, .embedding_dim = 2,
                            .feature_names = {"fa"}},
                           {.name = "b", .num_embeddings = 3, .embedding_dim = 4,
                            .feature_names = {"fb"}}}),
      Contains("all tables must have the same embedding_dim, but table \"a\" has 2 and table "
               "\"b\" has 4"));

  // Same seed and name: same table, whatever else is in the collection; bounds respected.
  EmbeddingBagCollection a(t, false, 42), b({t[1]}, false, 42), c(t, false, 43);
  CHECK(equal(a.table("t1")->weight().value(), b.table("t1")->weight().value()));
  CHECK(!equal(a.table("t1")->weight().value(), c.table("t1")->weight().value()));
  const double bound = std::sqrt(1.0 / 3);
  for (double x : dv(a.table("t1")->weight().value())) CHECK((x >= -bound && x < bound));
  auto explicit_bounds = t;
  explicit_bounds[0].weight_init_min = 2.0;
  explicit_bounds[0].weight_init_max = 3.0;
  for (double x : dv(EmbeddingBagCollection(explicit_bounds).table("t0")->weight().value()))
    CHECK((x >= 2.0 && x < 3.0));
}

TEST_CASE("EmbeddingCollection: per-id rows in KJT order", "[embedding_modules]") {
  EmbeddingCollection ec({{.name = "t0", .num_embeddings = 5, .embedding_dim = 2,
                           .feature_names = {"f0", "f1"}, .data_type = DType::Float64},
                          {.name = "t1", .num_embeddings = 3, .embedding_dim = 2,
                           .feature_names = {"g"}, .data_type = DType::Float64}});
  Tensor t0 = ec.table("t0")->weight().value();
  for (int64_t i = 0; i < t0.numel(); ++i) t0.set_flat(i, static_cast<double>(i));  // E[r] = [2r, 2r+1]
  Tensor t1 = ec.table("t1")->weight().value();
  for (int64_t i = 0; i < t1.numel(); ++i) t1.set_flat(i, 100.0 + static_cast<double>(i));
  SequenceEmbeddings out = ec.forward(example_kjt(true));
  CHECK(out.keys == std::vector<std::string>{"f0", "f1", "g"});
  CHECK(dv(out.values("f0").value()) == std::vector<double>{2, 3, 6, 7, 4, 5});
  CHECK(iv(out["f0"].lengths()) == V{2, 0, 1});
  CHECK(dv(out.values("f1").value()) == std::vector<double>{8, 9, 0, 1, 0, 1});
  CHECK(dv(out["g"].values()) == std::vector<double>{100, 101, 104, 105, 104, 105, 102, 103});
  CHECK(out["g"].values().shape() == Shape{4, 2});
  CHECK_THROWS_WITH(out.values("x"), Contains("no key \"x\""));

  // Sparse gradient: rows of the ids, duplicates accumulated, upstream ones.
  std::vector<Tensor> ones_like;
  for (auto& v : out.values_per_key) ones_like.push_back(ones(v.shape(), DType::Float64));
  backward(out.values_per_key, ones_like);
  const SparseRowGradient& g0 = ec.table("t0")->sparse_grad();
  CHECK(iv(g0.rows()) == V{0, 1, 2, 3, 4});
  CHECK(dv(g0.values()) == std::vector<double>{2, 2, 1, 1, 1, 1, 1, 1, 1, 1});
  CHECK(iv(ec.table("t1")->sparse_grad().rows()) == V{0, 1, 2});
  CHECK(dv(ec.table("t1")->sparse_grad().values()) == std::vector<double>{1, 1, 1, 1, 2, 2});

  CHECK(table_gradcheck([&] { return ec.forward(example_kjt(false)).values_per_key; },
                        *ec.table("t0")) == 0);
}

TEST_CASE("EmbeddingBagCollection: the sparse gradient is the touched rows, duplicates "
          "accumulated", "[embedding_modules]") {
  auto tables = example_tables();
  tables[0].num_embeddings = 1000;  // a large table: the gradient must stay 5 rows
  EmbeddingBagCollection ebc(tables, /*is_weighted=*/true, 3);
  PooledEmbeddings out = ebc.forward(example_kjt(true));
  // upstream: bag b of feature column c gets 1 + b (all columns)
  Tensor up = empty({3, 7}, DType::Float64);
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t c = 0; c < 7; ++c) up.set_flat(b * 7 + c, 1.0 + static_cast<double>(b));
  backward(out.values, up);
  const SparseRowGradient& g0 = ebc.table("t0")->sparse_grad();
  // t0 SUM: f0 ids 1 (0.5, b0), 3 (2, b0), 2 (1.5, b2); f1 ids 4 (-1, b0), 0 (1, b1), 0 (3, b1)
  CHECK(iv(g0.rows()) == V{0, 1, 2, 3, 4});
  CHECK(g0.values().shape() == Shape{5, 2});
  CHECK(dv(g0.values()) == std::vector<double>{8, 8, 0.5, 0.5, 4.5, 4.5, 2, 2, -1, -1});
  // t1 MEAN: g ids 0 (1), 2 (0.25), 2 (0.5) in bag 0 of 3 ids (upstream 1 / 3); 1 (4) in bag 1
  const SparseRowGradient& g1 = ebc.table("t1")->sparse_grad();
  CHECK(iv(g1.rows()) == V{0, 1, 2});
  const double third = 1.0 / 3;
  CHECK(dv(g1.values()) == std::vector<double>{third, third, third, 8, 8, 8,
                                               0.25 * third + 0.5 * third,
                                               0.25 * third + 0.5 * third,
                                               0.25 * third + 0.5 * third});
  CHECK(!ebc.table("t0")->weight().grad().defined());

  // A second backward accumulates; zero_sparse_grad resets.
  backward(ebc.forward(example_kjt(true)).values, up);
  CHECK(dv(ebc.table("t0")->sparse_grad().values())[0] == 16);
  ebc.table("t0")->zero_sparse_grad();
  CHECK(ebc.table("t0")->sparse_grad().empty());

  // A frozen table gets no gradient.
  ebc.table("t1")->zero_sparse_grad();
  ebc.table("t1")->weight().set_requires_grad(false);
  backward(ebc.forward(example_kjt(true)).values, up);
  CHECK(ebc.table("t1")->sparse_grad().empty());
  CHECK(!ebc.table("t0")->sparse_grad().empty());
}

TEST_CASE("EmbeddingBagCollection: gradcheck w.r.t. the tables (dense view) and the "
          "per-sample weights", "[embedding_modules]") {
  for (bool weighted : {false, true}) {
    CAPTURE(weighted);
    EmbeddingBagCollection ebc(example_tables(), weighted, 11);
    const auto kjt = example_kjt(weighted);
    auto fn = [&] { return std::vector<Variable>{ebc.forward(kjt).values}; };
    CHECK(table_gradcheck(fn, *ebc.table("t0")) == 0);  // SUM
    CHECK(table_gradcheck(fn, *ebc.table("t1")) == 0);  // MEAN
  }
  EmbeddingBagCollection ebc(example_tables(), true, 11);
  const auto kjt = example_kjt(true);
  GradcheckResult r = gradcheck(
      [&](const std::vector<Variable>& in) {
        return std::vector<Variable>{ebc.forward(kjt, in[0]).values};
      },
      {kjt.weights()});
  CHECK(r.ok);
  INFO(r.message);
  CHECK(r.elements_checked == 12);
  // The weights of the ignored key x get a zero gradient.
  Variable w(kjt.weights().clone(), true);
  backward(ebc.forward(kjt, w).values, ones({3, 7}, DType::Float64));
  CHECK(w.grad().get_flat(3) == 0);
  CHECK(w.grad().get_flat(0) != 0);
}

TEST_CASE("EmbeddingBagCollection: a per-sample-weight gradient after a fused step of another "
          "lookup is refused", "[embedding_modules]") {
  EmbeddingBagCollection ebc(example_tables(), true, 5, FusedOptimizerConfig{.learning_rate = 0.1});
  const auto kjt = example_kjt(true);
  Variable w(kjt.weights().clone(), true);
  PooledEmbeddings first = ebc.forward(kjt, w);
  PooledEmbeddings second = ebc.forward(kjt, w);
  backward(second.values, ones({3, 7}, DType::Float64));  // fused step changes the tables
  CHECK_THROWS_WITH(backward(first.values, ones({3, 7}, DType::Float64)),
                    Contains("was modified after this lookup's forward"));
}

TEST_CASE("EmbeddingBagCollection: state_dict round trip", "[embedding_modules]") {
  EmbeddingBagCollection a(example_tables(), false, 1), b(example_tables(), false, 2);
  auto sd = a.state_dict();
  CHECK(sd.count("embedding_bags.t0.weight") == 1);
  b.load_state_dict(sd);
  CHECK(equal(b.forward(example_kjt(false)).values.value(),
              a.forward(example_kjt(false)).values.value()));
  sd.erase("embedding_bags.t1.weight");
  CHECK_THROWS_WITH(b.load_state_dict(sd), Contains("no \"embedding_bags.t1.weight\""));
}
