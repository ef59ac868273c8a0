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
  generate(split, n, 1, s.dense.data(), &s.label, lengths.data(), 1, s.bags.data(), &s.probability,
           &s.dense_logit);
  return s;
}

namespace {

constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ULL;
constexpr size_t kPoissonHead = 8;  // CDF entries compared without a branch

// Word j of a sample's stream, whose state starts at `base`: what the j + 1-th next() of
// Rng(base) returns, reached without the j before it.
uint64_t word(uint64_t base, uint64_t j) { return mix(base + (j + 1) * kGamma); }
double uniform(uint64_t w) { return static_cast<double>(w >> 11) * 0x1.0p-53; }  // [0, 1)

// Dense: Marsaglia's polar method, a point drawn in the square until it falls inside the unit
// disc (probability pi / 4) gives two independent N(0, 1) for one log and one sqrt; one word per
// point, 32 bits per coordinate. Writes the w.size() features to out; returns sum_j w_j out_j.
double draw_dense(uint64_t base, uint64_t dense_at, uint64_t pairs, const std::vector<double>& w,
                  float* out) {
  const uint64_t num_dense = w.size();
  double logit = 0;
  for (uint64_t p = 0; p < pairs; ++p) {
    double x = 0, y = 0, r2 = 1;
    for (uint64_t a = 0; r2 >= 1 || r2 == 0; ++a) {
      const uint64_t v = word(base, dense_at + a * pairs + p);
      x = (static_cast<double>(static_cast<uint32_t>(v)) + 0.5) * 0x1.0p-31 - 1;
      y = (static_cast<double>(v >> 32) + 0.5) * 0x1.0p-31 - 1;
      r2 = x * x + y * y;
    }
    const double f = std::sqrt(-2.0 * std::log(r2) / r2);
    const double xy[2] = {x * f, y * f};
    for (uint64_t j = 2 * p; j < std::min<uint64_t>(2 * p + 2, num_dense); ++j) {
      const auto v = static_cast<float>(xy[j - 2 * p]);
      out[j] = v;
      logit += w[j] * static_cast<double>(v);
    }
  }
  return logit;
}

// The number of CDF entries the uniform u reaches. The first entries are counted without a
// branch (a loop's exit would be mispredicted at every draw), the rare long bags by the loop.
size_t poisson_count(double u, const std::vector<double>& cdf) {
  size_t extra = 0;
  const size_t head = std::min(cdf.size(), kPoissonHead);
  for (size_t k = 0; k < head; ++k) extra += u >= cdf[k] ? 1 : 0;
  if (extra == kPoissonHead) {
    while (extra < cdf.size() && u >= cdf[extra]) ++extra;
  }
  return extra;
}

// A loader thread's buffers, kept from batch to batch so that building a batch touches no fresh
// memory but its output tensors.
thread_local std::vector<std::vector<int64_t>> batch_ids;  // per table

}  // namespace

double SyntheticCriteo::draw_bag(size_t t, uint64_t base, uint64_t id_word, size_t length,
                                 int64_t* out) const {
  const detail::PowerLawRanks& ranks = ranks_[t];
  const std::vector<RankRow>& rows = rows_[t];
  const int32_t* guide = ranks.guide().data();
  const size_t last_cell = ranks.guide().size() - 2;
  const auto tabulated = static_cast<int32_t>(rows.size());
  double effect = 0;
  for (size_t k = 0; k < length; ++k) {
    // Most draws fall in a cell of the rank guide that holds no edge: decided here without a
    // call, the rest searched by rank().
    const double u = uniform(word(base, id_word + k));
    const size_t cell = std::min(static_cast<size_t>(u * ranks.cells()), last_cell);
    int64_t rank = guide[cell];
    if (rank != guide[cell + 1] || rank >= tabulated) rank = ranks.rank(u);
    if (rank < tabulated) {
      const RankRow& row = rows[static_cast<size_t>(rank)];
      out[k] = row.id;
      effect += row.effect;
    } else {  // the untabulated tail of a large table
      const int64_t id = id_of_rank(static_cast<int64_t>(t), rank);
      out[k] = id;
      effect += table_effect(static_cast<int64_t>(t), id);
    }
  }
  return effect;
}

void SyntheticCriteo::generate(Split split, int64_t first, int64_t count, float* dense,
                               float* labels, int64_t* lengths, int64_t lengths_stride,
                               std::vector<int64_t>* ids, double* probability,
                               double* dense_logit) const {
  FERRY_CHECK(count >= 0 && first >= 0 && first + count <= num_samples(split), InvalidArgument,
              "SyntheticCriteo: sample ", first + count - 1, " out of range (the split has ",
              num_samples(split), ")");
  const SyntheticCriteoConfig& c = config_;
  const auto num_tables = static_cast<size_t>(c.num_sparse);
  const auto num_dense = static_cast<size_t>(c.num_dense);
  const auto max_length = static_cast<uint64_t>(c.max_pooling_factor);
  const auto pairs = static_cast<uint64_t>((c.num_dense + 1) / 2);
  // Where each draw sits in a sample's stream (fixed positions: no draw's value depends on how
  // many words another one took): word 0 the label, 1 + t table t's bag length,
  // 1 + T + t * max_pooling_factor + k its k-th id, then the dense pairs (attempt a of pair p at
  // a * pairs + p past the ids: the polar method's rejections draw on upward).
  const uint64_t ids_at = 1 + num_tables;
  const uint64_t dense_at = ids_at + num_tables * max_length;
  const bool extra_ids = c.mean_pooling_factor > 1;
  const uint64_t split_seed = mix(c.seed) ^ mix(static_cast<uint64_t>(split) + 17);
  for (size_t i = 0; i < static_cast<size_t>(count); ++i) {
    const uint64_t base =
        mix(split_seed ^ mix((static_cast<uint64_t>(first) + i) * 0x2545f4914f6cdd1dULL));
    const double logit = draw_dense(base, dense_at, pairs, w_, dense + i * num_dense);
    double sparse_logit = 0;
    for (size_t t = 0; t < num_tables; ++t) {
      // The Poisson count of extra ids by inversion of its tabulated CDF (cut where the bag
      // reaches max_pooling_factor): one uniform, a few comparisons.
      const size_t extra = extra_ids ? poisson_count(uniform(word(base, 1 + t)), extra_cdf_) : 0;
      const size_t length = extra + 1;
      lengths[t * static_cast<size_t>(lengths_stride) + i] = static_cast<int64_t>(length);
      std::vector<int64_t>& bag = ids[t];
      const size_t at = bag.size();
      bag.resize(at + length);
      const double effect = draw_bag(t, base, ids_at + t * max_length, length, bag.data() + at);
      sparse_logit += effect / static_cast<double>(length);
    }
    const double p = sigmoid(c.bias + logit + sparse_logit * sparse_factor_);
    labels[i] = uniform(word(base, 0)) < p ? 1.0F : 0.0F;
    if (probability != nullptr) probability[i] = p;
    if (dense_logit != nullptr) dense_logit[i] = logit;
  }
}

Batch SyntheticCriteo::batch(Split split, int64_t first, int64_t count) const {
  // The dense values, labels and lengths are written straight into the batch's tensors; the ids
  // go to per-table buffers first (a bag's length is known only once drawn) and are copied once
  // into the values tensor.
  const SyntheticCriteoConfig& c = config_;
  Tensor dense = empty({count, c.num_dense}, DType::Float32);
  Tensor labels = empty({count}, DType::Float32);
  Tensor lengths = empty({c.num_sparse * count}, DType::Int64);
  std::vector<std::vector<int64_t>>& ids = batch_ids;
  ids.resize(static_cast<size_t>(c.num_sparse));
  for (auto& v : ids) v.clear();
  generate(split, first, count, dense.data<float>(), labels.data<float>(), lengths.data<int64_t>(),
           count, ids.data(), nullptr, nullptr);
  return assemble(std::move(dense), std::move(labels), std::move(lengths), ids, count);
}

Batch SyntheticCriteo::assemble(Tensor dense, Tensor labels, Tensor lengths,
                                const std::vector<std::vector<int64_t>>& ids,
                                int64_t count) const {
  std::vector<int64_t> length_per_key(ids.size());
  int64_t total = 0;
  for (size_t t = 0; t < ids.size(); ++t) {
    length_per_key[t] = static_cast<int64_t>(ids[t].size());
    total += length_per_key[t];
  }
  Tensor values = empty({total}, DType::Int64);
  int64_t* out = values.data<int64_t>();
  for (const auto& v : ids) out = std::copy(v.begin(), v.end(), out);
  Batch b;
  b.dense = std::move(dense);
  b.labels = std::move(labels);
  b.sparse = detail::kjt_with_checked_lengths(
      {.keys = keys_, .values = std::move(values), .lengths = std::move(lengths), .stride = count},
      std::move(length_per_key), "SyntheticCriteo::batch");
  return b;
}

void SyntheticCriteo::BatchInProgress::start(Split split, int64_t first, int64_t count) {
  const SyntheticCriteoConfig& c = data_->config_;
  FERRY_CHECK(count >= 0 && first >= 0 && first + count <= data_->num_samples(split),
              InvalidArgument, "SyntheticCriteo::BatchInProgress: samples [", first, ", ",
              first + count, ") are not in the split's [0, ", data_->num_samples(split), ")");
  split_ = split;
  first_ = first;
  count_ = count;
  built_ = 0;
  dense_ = empty({count, c.num_dense}, DType::Float32);
  labels_ = empty({count}, DType::Float32);
  lengths_ = empty({c.num_sparse * count}, DType::Int64);
  ids_.resize(static_cast<size_t>(c.num_sparse));
  for (auto& v : ids_) v.clear();
  started_ = true;
}

int64_t SyntheticCriteo::BatchInProgress::advance(int64_t samples) {
  FERRY_CHECK(started_, InvalidArgument, "SyntheticCriteo::BatchInProgress: advance() before start()");
  const int64_t n = std::min(samples, count_ - built_);
  if (n <= 0) return 0;
  const int64_t num_dense = data_->config_.num_dense;
  data_->generate(split_, first_ + built_, n, dense_.data<float>() + built_ * num_dense,
                  labels_.data<float>() + built_, lengths_.data<int64_t>() + built_, count_,
                  ids_.data(), nullptr, nullptr);
  built_ += n;
  return n;
}

Batch SyntheticCriteo::BatchInProgress::finish() {
  advance(count_ - built_);
  started_ = false;
  return data_->assemble(std::move(dense_), std::move(labels_), std::move(lengths_), ids_, count_);
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

}  // namespace ferry::torchrec
