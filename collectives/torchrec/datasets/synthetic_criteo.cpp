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
  // Knuth's product method (small means), given limit = exp(-mean) (mean > 0).
  int64_t poisson(double limit) {
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
  FERRY_CHECK(c.max_tabulated_rows >= 0, InvalidArgument,
              "SyntheticCriteo: max_tabulated_rows must be >= 0, got ", c.max_tabulated_rows);
  extra_ids_limit_ = std::exp(-(c.mean_pooling_factor - 1));
  for (int64_t t = 0; t < c.num_sparse; ++t) {
    ranks_.emplace_back(c.cardinalities[static_cast<size_t>(t)], c.zipf_exponent,
                        c.max_tabulated_rows);
    std::vector<RankRow>& rows = rows_.emplace_back();
    rows.reserve(static_cast<size_t>(ranks_.back().tabulated()));
    for (int64_t k = 0; k < ranks_.back().tabulated(); ++k) {
      const int64_t id = id_of_rank(t, k);
      rows.push_back({id, table_effect(t, id)});
    }
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

const detail::PowerLawRanks& SyntheticCriteo::ranks(int64_t table) const {
  FERRY_CHECK(table >= 0 && table < config_.num_sparse, InvalidArgument,
              "SyntheticCriteo: table ", table, " is not in [0, ", config_.num_sparse, ")");
  return ranks_[static_cast<size_t>(table)];
}

int64_t SyntheticCriteo::id_of_rank(int64_t table, int64_t rank) const {
  const auto t = static_cast<size_t>(table);
  // Cardinalities are below 2^31 (checked), so the product fits in 62 bits.
  return (rank * multiplier_[t] + offset_[t]) % config_.cardinalities[t];
}

SyntheticCriteo::Sample SyntheticCriteo::sample(Split split, int64_t n) const {
  Sample s;
  draw(split, n, s);
  return s;
}

void SyntheticCriteo::draw(Split split, int64_t n, Sample& s) const {
  FERRY_CHECK(n >= 0 && n < num_samples(split), InvalidArgument, "SyntheticCriteo: sample ", n,
              " out of range (the split has ", num_samples(split), ")");
  const SyntheticCriteoConfig& c = config_;
  Rng rng(mix(mix(c.seed) ^ mix(static_cast<uint64_t>(split) + 17) ^
              mix(static_cast<uint64_t>(n) * 0x2545f4914f6cdd1dULL)));
  s.dense.resize(static_cast<size_t>(c.num_dense));
  double dense_logit = 0;
  for (int64_t i = 0; i < c.num_dense; ++i) {
    const double x = rng.normal();
    s.dense[static_cast<size_t>(i)] = static_cast<float>(x);
    dense_logit += w_[static_cast<size_t>(i)] * static_cast<double>(static_cast<float>(x));
  }
  const bool extra_ids = c.mean_pooling_factor > 1;
  double sparse_logit = 0;
  s.bags.resize(static_cast<size_t>(c.num_sparse));
  for (int64_t t = 0; t < c.num_sparse; ++t) {
    const detail::PowerLawRanks& ranks = ranks_[static_cast<size_t>(t)];
    const std::vector<RankRow>& rows = rows_[static_cast<size_t>(t)];
    const int64_t length = std::min<int64_t>(
        1 + (extra_ids ? rng.poisson(extra_ids_limit_) : 0), c.max_pooling_factor);
    std::vector<int64_t>& bag = s.bags[static_cast<size_t>(t)];
    bag.resize(static_cast<size_t>(length));
    double effect = 0;
    for (int64_t k = 0; k < length; ++k) {
      const int64_t rank = ranks.rank(rng.uniform());
      if (rank < static_cast<int64_t>(rows.size())) {
        const RankRow& row = rows[static_cast<size_t>(rank)];
        bag[static_cast<size_t>(k)] = row.id;
        effect += row.effect;
      } else {  // the untabulated tail of a large table
        const int64_t id = id_of_rank(t, rank);
        bag[static_cast<size_t>(k)] = id;
        effect += table_effect(t, id);
      }
    }
    sparse_logit += effect / static_cast<double>(length);
  }
  sparse_logit *= c.sparse_scale / std::sqrt(static_cast<double>(c.num_sparse));
  s.dense_logit = dense_logit;
  s.probability = sigmoid(c.bias + dense_logit + sparse_logit);
  s.label = rng.uniform() < s.probability ? 1.0F : 0.0F;
}

Batch SyntheticCriteo::batch(Split split, int64_t first, int64_t count) const {
  detail::BatchBuilder builder(config_.num_dense, criteo_sparse_keys(config_.num_sparse), count);
  Sample s;  // its buffers are reused from sample to sample
  for (int64_t n = first; n < first + count; ++n) {
    draw(split, n, s);
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
