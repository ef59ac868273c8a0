// The fused sparse optimizers against hand-written reference loops over several steps: dense
// per-step gradients accumulated occurrence by occurrence, then each touched row updated once with
// the rule written out here. float64, same operation order, so the tables must be bit-identical.
// Also the non-fused path and the config validation.
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/jagged_test_util.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <set>

using namespace ferry;
using namespace ferry::torchrec;
using namespace ferry::torchrec::testing;
using Catch::Matchers::Contains;

namespace {

constexpr int64_t R = 7, D = 3, B = 4;

struct IdBatch {
  KeyedJaggedTensor kjt;
  Tensor upstream;  // [B, 2 D]: features f (SUM) and m (MEAN), both in the one table
};

IdBatch random_batch(uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<int64_t> values, lengths;
  std::vector<double> weights;
  for (int k = 0; k < 2; ++k) {
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = static_cast<int64_t>(gen() % 4);
      lengths.push_back(n);
      for (int64_t i = 0; i < n; ++i) {
        values.push_back(static_cast<int64_t>(gen() % 4));  // rows 0..3 only: 4..6 untouched
        weights.push_back(static_cast<double>(gen() % 1000) / 500.0 - 1.0);
      }
    }
  }
  return {KeyedJaggedTensor::from_lengths_sync({"f", "m"}, from_vector(values),
                                               from_vector(lengths), from_vector(weights)),
          uniform({B, 2 * D}, -1, 1, seed + 100, DType::Float64)};
}

// The reference: dense gradient of sum(upstream * out) by a plain loop (occurrence order).
std::vector<double> reference_gradient(const IdBatch& batch, std::set<int64_t>& touched) {
  std::vector<double> g(R * D, 0.0);
  const auto ids = batch.kjt.values().to_vector<int64_t>();
  const auto w = batch.kjt.weights().to_vector<double>();
  const auto len = batch.kjt.lengths().to_vector<int64_t>();
  int64_t pos = 0;
  for (int k = 0; k < 2; ++k) {
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = len[static_cast<size_t>(k * B + b)];
      for (int64_t i = 0; i < n; ++i, ++pos) {
        const int64_t r = ids[static_cast<size_t>(pos)];
        touched.insert(r);
        for (int64_t d = 0; d < D; ++d) {
          double gb = batch.upstream.get_flat(b * 2 * D + k * D + d);
          if (k == 1) gb = gb / static_cast<double>(n);  // MEAN: divided by n
          g[static_cast<size_t>(r * D + d)] += w[static_cast<size_t>(pos)] * gb;
        }
      }
    }
  }
  return g;
}

struct Reference {
  FusedOptimizerConfig c;
  std::vector<double> w, m, v;
  int64_t t = 0;

  void step(const std::vector<double>& g, const std::set<int64_t>& touched) {
    ++t;
    const double lr = c.learning_rate, eps = c.eps, wd = c.weight_decay;
    for (int64_t r : touched) {
      double* wr = &w[static_cast<size_t>(r * D)];
      const double* gr = &g[static_cast<size_t>(r * D)];
      switch (c.optimizer) {
        case EmbOptimType::Sgd:
          for (int64_t d = 0; d < D; ++d) wr[d] = wr[d] - lr * gr[d];
          break;
        case EmbOptimType::ExactAdagrad:
          for (int64_t d = 0; d < D; ++d) {
            double& md = m[static_cast<size_t>(r * D + d)];
            md = md + gr[d] * gr[d];
            wr[d] = wr[d] - lr * gr[d] / (std::sqrt(md) + eps);
          }
          break;
        case EmbOptimType::ExactRowwiseAdagrad: {
          const bool l2 = c.weight_decay_mode == WeightDecayMode::L2;
          double sq = 0;
          for (int64_t d = 0; d < D; ++d) {
            const double h = l2 ? gr[d] + wd * wr[d] : gr[d];
            sq += h * h;
          }
          double& mr = m[static_cast<size_t>(r)];
          mr = mr + sq / static_cast<double>(D);
          const double mult = lr / (std::sqrt(mr) + eps);
          double cw = 1;
          if (c.weight_decay_mode == WeightDecayMode::L2) cw = 1 - mult * wd;
          if (c.weight_decay_mode == WeightDecayMode::Decoupled) cw = 1 - lr * wd;
          for (int64_t d = 0; d < D; ++d) {
            wr[d] = c.weight_decay_mode == WeightDecayMode::None ? wr[d] - mult * gr[d]
                                                                  : cw * wr[d] - mult * gr[d];
          }
          break;
        }
        case EmbOptimType::Adam:
          for (int64_t d = 0; d < D; ++d) {
            const size_t i = static_cast<size_t>(r * D + d);
            m[i] = c.beta1 * m[i] + (1 - c.beta1) * gr[d];
            v[i] = c.beta2 * v[i] + (1 - c.beta2) * gr[d] * gr[d];
            const double mhat = m[i] / (1 - std::pow(c.beta1, static_cast<double>(t)));
            const double vhat = v[i] / (1 - std::pow(c.beta2, static_cast<double>(t)));
            wr[d] = wr[d] - lr * mhat / (std::sqrt(vhat) + eps);
          }
          break;
      }
    }
  }
};

EmbeddingBagConfig table_config() {
  return {.name = "t", .num_embeddings = R, .embedding_dim = D, .feature_names = {"f"},
          .pooling = PoolingType::Sum, .data_type = DType::Float64};
}

// Runs `steps` fused steps through an EBC (f SUM and m MEAN served by one table) and the
// reference; returns whether the tables stayed bit-identical after every step.
void run_against_reference(const FusedOptimizerConfig& config, int steps) {
  auto table = std::make_shared<EmbeddingTable>(
      "t", uniform({R, D}, -1, 1, 77, DType::Float64));
  table->set_fused_optimizer(config);
  Reference ref{config, table->weight().value().to_vector<double>(),
                std::vector<double>(config.optimizer == EmbOptimType::ExactRowwiseAdagrad ? R
                                                                                          : R * D,
                                    config.initial_accumulator_value),
                std::vector<double>(R * D, 0.0)};
  const std::vector<double> untouched_before(ref.w.begin() + 4 * D, ref.w.end());
  for (int s = 0; s < steps; ++s) {
    CAPTURE(s);
    IdBatch batch = random_batch(1000 + static_cast<uint64_t>(s));
    Variable out = pooled_embedding_lookup(
        {{.table = table, .feature = "f", .pooling = PoolingType::Sum},
         {.table = table, .feature = "m", .pooling = PoolingType::Mean}},
        batch.kjt, Variable(batch.kjt.weights()));
    backward(out, batch.upstream);
    std::set<int64_t> touched;
    ref.step(reference_gradient(batch, touched), touched);
    REQUIRE(table->weight().value().to_vector<double>() == ref.w);
    CHECK(table->fused_optimizer()->step_count() == s + 1);
    CHECK(table->sparse_grad().empty());  // fused: nothing accumulated
  }
  // Rows 4..6 were never touched: unchanged, and their state too.
  const auto w = table->weight().value().to_vector<double>();
  CHECK(std::vector<double>(w.begin() + 4 * D, w.end()) == untouched_before);
  if (config.optimizer == EmbOptimType::ExactRowwiseAdagrad) {
    CHECK(table->fused_optimizer()->momentum1().get_flat(5) == config.initial_accumulator_value);
    CHECK(table->fused_optimizer()->momentum1().to_vector<double>() == ref.m);
  }
}

}  // namespace

TEST_CASE("fused SGD, Adagrad, row-wise Adagrad (three weight-decay modes) and lazy Adam "
          "against reference loops", "[fused_optimizers]") {
  SECTION("SGD") {
    run_against_reference({.optimizer = EmbOptimType::Sgd, .learning_rate = 0.3}, 5);
  }
  SECTION("EXACT_ADAGRAD") {
    run_against_reference({.optimizer = EmbOptimType::ExactAdagrad, .learning_rate = 0.2,
                           .eps = 1e-3, .initial_accumulator_value = 0.1},
                          5);
  }
  SECTION("EXACT_ROWWISE_ADAGRAD, no weight decay") {
    run_against_reference({.optimizer = EmbOptimType::ExactRowwiseAdagrad, .learning_rate = 0.2,
                           .eps = 1e-4},
                          5);
  }
  SECTION("EXACT_ROWWISE_ADAGRAD, L2") {
    run_against_reference({.optimizer = EmbOptimType::ExactRowwiseAdagrad, .learning_rate = 0.2,
                           .eps = 1e-4, .weight_decay = 0.05,
                           .weight_decay_mode = WeightDecayMode::L2},
                          5);
  }
  SECTION("EXACT_ROWWISE_ADAGRAD, decoupled") {
    run_against_reference({.optimizer = EmbOptimType::ExactRowwiseAdagrad, .learning_rate = 0.2,
                           .eps = 1e-4, .weight_decay = 0.05,
                           .weight_decay_mode = WeightDecayMode::Decoupled},
                          5);
  }
  SECTION("ADAM (lazy, global step count)") {
    run_against_reference({.optimizer = EmbOptimType::Adam, .learning_rate = 0.05, .eps = 1e-6,
                           .beta1 = 0.8, .beta2 = 0.95},
                          6);
  }
}

TEST_CASE("the weight-decay modes differ from each other", "[fused_optimizers]") {
  // Guards the reference itself: with wd > 0 the three modes give three different tables.
  std::vector<std::vector<double>> results;
  for (WeightDecayMode mode : {WeightDecayMode::None, WeightDecayMode::L2,
                               WeightDecayMode::Decoupled}) {
    auto table = std::make_shared<EmbeddingTable>("t", uniform({R, D}, -1, 1, 77, DType::Float64));
    table->set_fused_optimizer({.optimizer = EmbOptimType::ExactRowwiseAdagrad,
                                .learning_rate = 0.2, .weight_decay = mode == WeightDecayMode::None ? 0.0 : 0.05,
                                .weight_decay_mode = mode});
    IdBatch batch = random_batch(1000);
    backward(pooled_embedding_lookup({{.table = table, .feature = "f"}}, batch.kjt),
             batch.upstream.narrow_copy(1, 0, D));
    results.push_back(table->weight().value().to_vector<double>());
  }
  CHECK(results[0] != results[1]);
  CHECK(results[1] != results[2]);
  CHECK(results[0] != results[2]);
}

TEST_CASE("non-fused path: the sparse gradient applied by hand equals the fused step",
          "[fused_optimizers]") {
  const FusedOptimizerConfig config{.optimizer = EmbOptimType::Adam, .learning_rate = 0.05};
  EmbeddingBagCollection fused({table_config()}, false, 5, config);
  EmbeddingBagCollection plain({table_config()}, false, 5);
  auto t = plain.table("t");
  SparseOptimizer opt(config, R, D, DType::Float64);
  for (int s = 0; s < 3; ++s) {
    IdBatch batch = random_batch(2000 + static_cast<uint64_t>(s));
    Tensor up = batch.upstream.narrow_copy(1, 0, D);
    backward(fused.forward(batch.kjt).values, up);
    backward(plain.forward(batch.kjt).values, up);
    CHECK(!t->sparse_grad().empty());
    t->step(opt);
    CHECK(t->sparse_grad().empty());
    REQUIRE(equal(t->weight().value(), fused.table("t")->weight().value()));
  }
  // Averaging by hand (data-parallel tables): scale and densify.
  IdBatch batch = random_batch(3000);
  backward(plain.forward(batch.kjt).values, batch.upstream.narrow_copy(1, 0, D));
  SparseRowGradient g = t->sparse_grad();
  SparseRowGradient twice = g;
  twice.add_(g);
  twice.scale_(0.5);
  CHECK(equal(twice.to_dense(R), g.to_dense(R)));
}

TEST_CASE("fused optimizer configs: validation", "[fused_optimizers]") {
  CHECK_THROWS_WITH(validate({.optimizer = EmbOptimType::Adam, .weight_decay = 0.1}),
                    Contains("ADAM: weight decay is only supported by EXACT_ROWWISE_ADAGRAD"));
  CHECK_THROWS_WITH(validate({.optimizer = EmbOptimType::Adam, .beta1 = 1.0}),
                    Contains("betas must be in [0, 1)"));
  CHECK_THROWS_WITH(validate({.optimizer = EmbOptimType::ExactAdagrad, .eps = 0}),
                    Contains("EXACT_ADAGRAD: eps must be > 0"));
  CHECK_THROWS_WITH(validate({.learning_rate = -1}), Contains("learning_rate must be >= 0"));
  SparseOptimizer opt({}, R, D, DType::Float64);
  Tensor wrong = zeros({R, D + 1}, DType::Float64);
  CHECK_THROWS_WITH(opt.step(wrong, SparseRowGradient(D, DType::Float64)),
                    Contains("the weight must be [7, 3] float64"));
}
