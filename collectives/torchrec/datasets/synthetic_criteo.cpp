#include <ferry/collectives/torchrec/datasets/synthetic_criteo.h>

#include <ferry/collectives/torchrec/metrics/auc.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>
#include <utility>

namespace ferry::torchrec {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A counter-seeded stream of uniforms and normals.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix(state_ += 0x9e3779b97f4a7c15ULL); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double open_uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  double normal() {  // Box-Muller, one of the pair
    const double r = std::sqrt(-2.0 * std::log(open_uniform()));
    return r * std::cos(2.0 * std::numbers::pi * uniform());
  }
  int64_t poisson(double mean) {  // Knuth's product method (small means)
    if (mean <= 0) return 0;
    const double limit = std::exp(-mean);
    int64_t k = 0;
    for (double p = uniform(); p > limit; p *= uniform()) ++k;
    return k;
  }

 private:
  uint64_t state_;
};

double sigmoid(double x) { return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x)); }

}  // namespace

std::vector<int64_t> default_cardinalities(int64_t num_sparse) {
  std::vector<int64_t> out;
  for (int64_t t = 0; t < num_sparse; ++t) {
    const double e = num_sparse == 1 ? 2.0 : 2.0 + 4.0 * static_cast<double>(t) /
                                                       static_cast<double>(num_sparse - 1);
    out.push_back(static_cast<int64_t>(std::llround(std::pow(10.0, e))));
  }
  return out;
}

SyntheticCriteo::SyntheticCriteo(SyntheticCriteoConfig config) : config_(std::move(config)) {
  SyntheticCriteoConfig& c = config_;
  FERRY_CHECK(c.num_dense >= 0 && c.num_sparse >= 1, InvalidArgument,
              "SyntheticCriteo: need num_dense >= 0 and num_sparse >= 1");
  if (c.cardinalities.empty()) c.cardinalities = default_cardinalities(c.num_sparse);
  FERRY_CHECK(static_cast<int64_t>(c.cardinalities.size()) == c.num_sparse, InvalidArgument,
              "SyntheticCriteo: ", c.cardinalities.size(), " cardinalities for ", c.num_sparse,
              " sparse features");
  for (int64_t card : c.cardinalities) {
    FERRY_CHECK(card >= 1 && card < (int64_t{1} << 31), InvalidArgument,
                "SyntheticCriteo: cardinality ", card, " is not in [1, 2^31)");
  }
  FERRY_CHECK(c.mean_pooling_factor >= 1 && c.max_pooling_factor >= 1 && c.zipf_exponent > 0 &&
                  c.num_train >= 0 && c.num_test >= 0,
              InvalidArgument, "SyntheticCriteo: need mean_pooling_factor >= 1, "
              "max_pooling_factor >= 1, zipf_exponent > 0 and non-negative split sizes");
  Rng rng(mix(c.seed ^ 0x5eed));
  for (int64_t i = 0; i < c.num_dense; ++i) {
    w_.push_back(rng.normal() * c.dense_scale / std::sqrt(static_cast<double>(c.num_dense)));
  }
  for (int64_t t = 0; t < c.num_sparse; ++t) {
    const int64_t card = c.cardinalities[static_cast<size_t>(t)];
    int64_t a = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(card)) | 1;
    while (card > 1 && std::gcd(a % card, card) != 1) a = (a + 1) % card;
    multiplier_.push_back(card > 1 ? a % card : 0);
    offset_.push_back(static_cast<int64_t>(rng.next() % static_cast<uint64_t>(card)));
  }
}

int64_t SyntheticCriteo::num_samples(Split split) const {
  return split == Split::Train ? config_.num_train : config_.num_test;
}

double SyntheticCriteo::table_effect(int64_t table, int64_t id) const {
  Rng rng(mix(mix(config_.seed ^ 0xeffec7) ^ mix(static_cast<uint64_t>(table) << 40) ^
              static_cast<uint64_t>(id)));
  return rng.normal();
}

int64_t SyntheticCriteo::id_of_rank(int64_t table, int64_t rank) const {
  const auto t = static_cast<size_t>(table);
  // Cardinalities are below 2^31 (checked), so the product fits in 62 bits.
  return (rank * multiplier_[t] + offset_[t]) % config_.cardinalities[t];
}

SyntheticCriteo::Sample SyntheticCriteo::sample(Split split, int64_t n) const {
  FERRY_CHECK(n >= 0 && n < num_samples(split), InvalidArgument, "SyntheticCriteo: sample ", n,
              " out of range (the split has ", num_samples(split), ")");
  const SyntheticCriteoConfig& c = config_;
  Rng rng(mix(mix(c.seed) ^ mix(static_cast<uint64_t>(split) + 17) ^
              mix(static_cast<uint64_t>(n) * 0x2545f4914f6cdd1dULL)));
  Sample s;
  s.dense.resize(static_cast<size_t>(c.num_dense));
  double dense_logit = 0;
  for (int64_t i = 0; i < c.num_dense; ++i) {
    const double x = rng.normal();
    s.dense[static_cast<size_t>(i)] = static_cast<float>(x);
    dense_logit += w_[static_cast<size_t>(i)] * static_cast<double>(static_cast<float>(x));
  }
  const double s_exp = c.zipf_exponent;
  double sparse_logit = 0;
  s.bags.resize(static_cast<size_t>(c.num_sparse));
  for (int64_t t = 0; t < c.num_sparse; ++t) {
    const auto card = static_cast<double>(c.cardinalities[static_cast<size_t>(t)]);
    const int64_t length =
        std::min<int64_t>(1 + rng.poisson(c.mean_pooling_factor - 1), c.max_pooling_factor);
    std::vector<int64_t>& bag = s.bags[static_cast<size_t>(t)];
    double effect = 0;
    for (int64_t k = 0; k < length; ++k) {
      // Inverse CDF of density ∝ x^-s on [1, card + 1), then popularity rank floor(x) - 1.
      const double u = rng.uniform();
      const double x = std::abs(s_exp - 1) < 1e-12
                           ? std::pow(card + 1, u)
                           : std::pow(1 + u * (std::pow(card + 1, 1 - s_exp) - 1), 1 / (1 - s_exp));
      const auto rank = std::clamp<int64_t>(static_cast<int64_t>(x) - 1, 0,
                                            c.cardinalities[static_cast<size_t>(t)] - 1);
      const int64_t id = id_of_rank(t, rank);
      bag.push_back(id);
      effect += table_effect(t, id);
    }
    sparse_logit += effect / static_cast<double>(length);
  }
  sparse_logit *= c.sparse_scale / std::sqrt(static_cast<double>(c.num_sparse));
  s.dense_logit = dense_logit;
  s.probability = sigmoid(c.bias + dense_logit + sparse_logit);
  s.label = rng.uniform() < s.probability ? 1.0F : 0.0F;
  return s;
}

Batch SyntheticCriteo::batch(Split split, int64_t first, int64_t count) const {
  detail::BatchBuilder builder(config_.num_dense, criteo_sparse_keys(config_.num_sparse), count);
  for (int64_t n = first; n < first + count; ++n) {
    const Sample s = sample(split, n);
    builder.add(s.dense, s.bags, s.label);
  }
  return builder.finish();
}

double SyntheticCriteo::bayes_auc(int64_t samples) const {
  const int64_t n = std::min(samples, num_samples(Split::Test));
  std::vector<double> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = sample(Split::Test, i).probability;
  return auc_expected(p, p);
}

double SyntheticCriteo::dense_only_auc(int64_t samples) const {
  const int64_t n = std::min(samples, num_samples(Split::Test));
  std::vector<double> score(static_cast<size_t>(n)), p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const Sample s = sample(Split::Test, i);
    score[static_cast<size_t>(i)] = s.dense_logit;
    p[static_cast<size_t>(i)] = s.probability;
  }
  return auc_expected(score, p);
}

SyntheticCriteoSource::SyntheticCriteoSource(const SyntheticCriteo& data, Split split,
                                             const ShardOptions& options)
    : data_(&data), split_(split), schedule_(data.num_samples(split), options) {}

std::optional<Batch> SyntheticCriteoSource::next_batch() {
  if (next_ >= schedule_.num_batches()) return std::nullopt;
  const int64_t i = next_++;
  return data_->batch(split_, schedule_.first_sample(i), schedule_.batch_size(i));
}

}  // namespace ferry::torchrec
