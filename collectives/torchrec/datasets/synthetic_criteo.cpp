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
  // Box-Muller, one of the pair: the hidden model's weights and table effects (its definition,
  // which the tests recompute).
  double normal() {
    const double r = std::sqrt(-2.0 * std::log(open_uniform()));
    return r * std::cos(2.0 * std::numbers::pi * uniform());
  }
  // Marsaglia's polar method: two independent N(0, 1) from one log and one sqrt, no cos (the
  // per-sample dense features). A point is drawn in the square until it falls in the unit disc
  // (probability pi / 4); each coordinate takes 32 bits of one random word.
  void normal_pair(double& a, double& b) {
    for (;;) {
      const uint64_t w = next();
      const double x = (static_cast<double>(static_cast<uint32_t>(w)) + 0.5) * 0x1.0p-31 - 1;
      const double y = (static_cast<double>(w >> 32) + 0.5) * 0x1.0p-31 - 1;
      const double r2 = x * x + y * y;
      if (r2 < 1) {
        const double f = std::sqrt(-2.0 * std::log(r2) / r2);
        a = x * f;
        b = y * f;
        return;
      }
    }
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
  // The CDF of the Poisson(mean_pooling_factor - 1) count of extra ids, for k = 0 ..
  // max_pooling_factor - 2; a uniform past its last entry gives the longest bag.
  {
    const double mean = c.mean_pooling_factor - 1;
    double p = std::exp(-mean), cdf = 0;
    for (int64_t k = 0; k + 1 < c.max_pooling_factor; ++k) {
      cdf += p;
      extra_cdf_.push_back(cdf);
      p *= mean / static_cast<double>(k + 1);
    }
  }
  sparse_factor_ = c.sparse_scale / std::sqrt(static_cast<double>(c.num_sparse));
  keys_ = criteo_sparse_keys(c.num_sparse);
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
  const SyntheticCriteoConfig& c = config_;
  Sample s;
  s.dense.resize(static_cast<size_t>(c.num_dense));
  s.bags.resize(static_cast<size_t>(c.num_sparse));
  std::vector<int64_t> lengths(static_cast<size_t>(c.num_sparse));
  const Drawn d = draw(split, n, s.dense.data(), s.bags.data(), lengths.data(), 1);
  s.label = d.label;
  s.probability = d.probability;
  s.dense_logit = d.dense_logit;
  return s;
}

SyntheticCriteo::Drawn SyntheticCriteo::draw(Split split, int64_t n, float* dense,
                                             std::vector<int64_t>* ids, int64_t* lengths,
                                             int64_t stride) const {
  FERRY_CHECK(n >= 0 && n < num_samples(split), InvalidArgument, "SyntheticCriteo: sample ", n,
              " out of range (the split has ", num_samples(split), ")");
  const SyntheticCriteoConfig& c = config_;
  Rng rng(mix(mix(c.seed) ^ mix(static_cast<uint64_t>(split) + 17) ^
              mix(static_cast<uint64_t>(n) * 0x2545f4914f6cdd1dULL)));
  double dense_logit = 0;
  for (int64_t i = 0; i < c.num_dense; i += 2) {
    double x[2];
    rng.normal_pair(x[0], x[1]);
    for (int64_t j = i; j < std::min(i + 2, c.num_dense); ++j) {
      const auto v = static_cast<float>(x[j - i]);
      dense[j] = v;
      dense_logit += w_[static_cast<size_t>(j)] * static_cast<double>(v);
    }
  }
  const bool extra_ids = c.mean_pooling_factor > 1;
  const auto num_cdf = extra_cdf_.size();
  double sparse_logit = 0;
  for (int64_t t = 0; t < c.num_sparse; ++t) {
    const detail::PowerLawRanks& ranks = ranks_[static_cast<size_t>(t)];
    const std::vector<RankRow>& rows = rows_[static_cast<size_t>(t)];
    // The Poisson count of extra ids by inversion of its tabulated CDF (cut where the bag
    // length reaches max_pooling_factor): one uniform, a few comparisons.
    size_t extra = 0;
    if (extra_ids) {
      const double u = rng.uniform();
      while (extra < num_cdf && u >= extra_cdf_[extra]) ++extra;
    }
    const auto length = static_cast<int64_t>(extra) + 1;
    lengths[t * stride] = length;
    std::vector<int64_t>& bag = ids[t];
    const size_t at = bag.size();
    bag.resize(at + static_cast<size_t>(length));
    int64_t* out = bag.data() + at;
    double effect = 0;
    for (int64_t k = 0; k < length; ++k) {
      const int64_t rank = ranks.rank(rng.uniform());
      if (rank < static_cast<int64_t>(rows.size())) {
        const RankRow& row = rows[static_cast<size_t>(rank)];
        out[k] = row.id;
        effect += row.effect;
      } else {  // the untabulated tail of a large table
        const int64_t id = id_of_rank(t, rank);
        out[k] = id;
        effect += table_effect(t, id);
      }
    }
    sparse_logit += effect / static_cast<double>(length);
  }
  sparse_logit *= sparse_factor_;
  Drawn d;
  d.dense_logit = dense_logit;
  d.probability = sigmoid(c.bias + dense_logit + sparse_logit);
  d.label = rng.uniform() < d.probability ? 1.0F : 0.0F;
  return d;
}

namespace {
// A loader thread's buffers for the ids of a batch, per table, kept from batch to batch so that
// building a batch touches no fresh memory but its output tensors.
thread_local std::vector<std::vector<int64_t>> batch_ids;
}  // namespace

Batch SyntheticCriteo::batch(Split split, int64_t first, int64_t count) const {
  const SyntheticCriteoConfig& c = config_;
  FERRY_CHECK(count >= 0 && first >= 0 && first + count <= num_samples(split), InvalidArgument,
              "SyntheticCriteo: samples [", first, ", ", first + count,
              ") out of range (the split has ", num_samples(split), ")");
  // The dense values, labels and lengths are written straight into the batch's tensors; the ids
  // go to per-table buffers first (a bag's length is known only once drawn) and are copied once
  // into the values tensor.
  Batch b;
  b.dense = empty({count, c.num_dense}, DType::Float32);
  b.labels = empty({count}, DType::Float32);
  Tensor lengths = empty({c.num_sparse * count}, DType::Int64);
  float* dense = b.dense.data<float>();
  float* labels = b.labels.data<float>();
  int64_t* length = lengths.data<int64_t>();
  std::vector<std::vector<int64_t>>& ids = batch_ids;
  ids.resize(static_cast<size_t>(c.num_sparse));
  for (auto& v : ids) v.clear();
  for (int64_t i = 0; i < count; ++i) {
    labels[i] = draw(split, first + i, dense + i * c.num_dense, ids.data(), length + i, count)
                    .label;
  }
  std::vector<int64_t> length_per_key(static_cast<size_t>(c.num_sparse));
  int64_t total = 0;
  for (size_t t = 0; t < ids.size(); ++t) {
    length_per_key[t] = static_cast<int64_t>(ids[t].size());
    total += length_per_key[t];
  }
  Tensor values = empty({total}, DType::Int64);
  int64_t* out = values.data<int64_t>();
  for (const auto& v : ids) out = std::copy(v.begin(), v.end(), out);
  b.sparse = detail::kjt_with_checked_lengths(
      {.keys = keys_, .values = std::move(values), .lengths = std::move(lengths), .stride = count},
      std::move(length_per_key), "SyntheticCriteo::batch");
  return b;
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
