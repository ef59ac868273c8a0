// ferry::torchrec::SyntheticCriteo: an embedded, Criteo-like click dataset whose labels come
// from a fixed hidden model, so that a DLRM trained on it can learn.
//
// Sample n of a split (train = 0, test = 1) is a pure function of (seed, split, n), drawn from
// its own counter-seeded generator: any rank produces any sample without the others, batch size
// and world size do not change the data, and a rank computes only its own batches (ShardOptions
// in batch.h cut the split into per-rank batches). Each draw reads its own words of the
// sample's stream, at fixed positions (the label, then one per bag length, then
// max_pooling_factor per table for the ids, the dense features last).
//
// One sample:
//   dense   num_dense values, each N(0, 1) (already "normalised" features).
//   sparse  one bag per table t: length 1 + Poisson(mean_pooling_factor - 1), at most
//           max_pooling_factor; each id drawn independently from a power law over the table's
//           cardinality c_t: the popularity rank k in [0, c_t) has density ∝ (k + 1)^-s on the
//           continuous approximation (s = zipf_exponent), mapped to the id (k * a_t + b_t) mod
//           c_t (a_t coprime with c_t, so hot ids are spread over the table, not all in row 0).
//   label   Bernoulli(sigmoid(logit)), with the hidden model
//             logit = bias + sum_i w_i dense_i + sparse_scale / sqrt(T) * sum_t mean_{id in bag}
//                     e_t(id),
//           w_i ~ N(0, dense_scale^2 / num_dense) fixed by the seed, e_t(id) ~ N(0, 1) a fixed
//           hash of (seed, t, id).
// Cardinalities default to a geometric spread from 10^2 to 10^6 over the tables
// (default_cardinalities).
//
// Cost: about 1 to 2 µs per sample of 13 dense features and 26 bags of mean 3 on these
// machines (ferry-dlrm's tables), no transcendental function per id. The constructor
// tabulates, per table, its max_tabulated_rows most popular ranks (all of them for a table no
// larger): the rank draw as a guide-table look-up over the CDF's edges (detail::PowerLawRanks,
// power_law_ranks.h; most draws are decided by the guide alone) and, per rank, its id and the
// id's e_t (the same function, evaluated once). A uniform that falls past the tabulated ranks
// (only in tables larger than max_tabulated_rows) takes the closed-form inverse CDF and
// computes e_t on the spot. The bag length is drawn by inversion of the Poisson CDF, tabulated
// once (one uniform, a few comparisons). The dense features come in pairs from Marsaglia's
// polar method (one log and one sqrt per pair; exact normals, with 32-bit coordinates). What
// is left per sample is one sigmoid. batch() writes the dense values, labels and lengths into
// the batch's tensors directly and the ids through per-thread buffers reused from batch to
// batch, so a batch allocates only its own tensors.
// Memory: about 28 bytes per tabulated rank; the defaults (26 tables of 10^2..10^6 rows, 2^16
// tabulated each) hold 0.69M ranks, about 19 MB, built in tens of ms; ferry-dlrm's tables of at
// most 10^4 rows are tabulated whole. The tabulated draw equals the closed form's except when
// the uniform lies within rounding error of the edge between two ranks (power_law_ranks.h:
// about cardinality * 1e-16 of the draws), where the rank may differ by one; the values of e_t,
// the dense features and the bag lengths are bit for bit those of the closed-form evaluation.
//
// bayes_auc(): the AUC of the Bayes-optimal scorer (the true probability) against the labels
// the generator draws, computed exactly in expectation over the labels on the first `samples`
// test samples (auc_expected in metrics/auc.h: no label noise in the estimate). Nothing can beat
// it on average; dense_only_auc() is the same for the dense part of the logit alone (what a
// model that ignores the embeddings can reach).
#pragma once

#include <ferry/collectives/torchrec/datasets/batch.h>
#include <ferry/collectives/torchrec/datasets/power_law_ranks.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ferry::torchrec {

struct SyntheticCriteoConfig {
  int64_t num_dense = 13;
  int64_t num_sparse = 26;
  std::vector<int64_t> cardinalities{};  // num_sparse entries; empty = default spread
  double mean_pooling_factor = 3.0;      // >= 1
  int64_t max_pooling_factor = 20;
  double zipf_exponent = 1.05;           // > 0
  int64_t num_train = 1 << 16;
  int64_t num_test = 1 << 14;
  // The hidden model.
  double bias = -1.0;
  double dense_scale = 1.0;
  double sparse_scale = 2.0;
  uint64_t seed = 0;
  // Per table, the most popular ranks whose draw and e_t are precomputed (see Cost above);
  // 0 evaluates every draw in closed form (the reference the tests compare with).
  int64_t max_tabulated_rows = int64_t{1} << 16;
};

// n tables, cardinalities round(10^(2 + 4 t / (n - 1))): 100, ..., 10^6 (100 for n == 1).
std::vector<int64_t> default_cardinalities(int64_t num_sparse);

enum class Split { Train = 0, Test = 1 };

class SyntheticCriteo {
 public:
  explicit SyntheticCriteo(SyntheticCriteoConfig config);  // validates; fills cardinalities

  const SyntheticCriteoConfig& config() const { return config_; }
  int64_t num_samples(Split split) const;

  // One sample, with its true click probability (of the hidden model) and the dense part of the
  // logit.
  struct Sample {
    std::vector<float> dense;
    std::vector<std::vector<int64_t>> bags;  // per table
    float label = 0;
    double probability = 0;
    double dense_logit = 0;
  };
  Sample sample(Split split, int64_t n) const;

  // Samples [first, first + count) of a split as one Batch.
  Batch batch(Split split, int64_t first, int64_t count) const;

  // The same batch built a few samples at a time, for a source that draws it in pieces (see
  // SyntheticCriteoSource's fill_waits): finish() returns what batch() returns for the range.
  // Its buffers are kept from one batch to the next.
  class BatchInProgress {
   public:
    explicit BatchInProgress(const SyntheticCriteo& data) : data_(&data) {}
    // Starts samples [first, first + count) of `split` (allocates the batch's tensors).
    void start(Split split, int64_t first, int64_t count);
    bool started() const { return started_; }
    bool done() const { return started_ && built_ == count_; }
    // Draws the next min(samples, left) samples; returns how many.
    int64_t advance(int64_t samples);
    // Draws what is left and returns the batch; the next one needs start() again.
    Batch finish();

   private:
    const SyntheticCriteo* data_;
    bool started_ = false;
    Split split_ = Split::Train;
    int64_t first_ = 0;
    int64_t count_ = 0;
    int64_t built_ = 0;
    Tensor dense_;
    Tensor labels_;
    Tensor lengths_;
    std::vector<std::vector<int64_t>> ids_;  // per table
  };

  double bayes_auc(int64_t samples = 1 << 15) const;
  double dense_only_auc(int64_t samples = 1 << 15) const;

  // The hidden model's pieces (for tests).
  const std::vector<double>& dense_weights() const { return w_; }
  double table_effect(int64_t table, int64_t id) const;  // computed, not looked up
  int64_t id_of_rank(int64_t table, int64_t rank) const;  // popularity rank -> id
  const detail::PowerLawRanks& ranks(int64_t table) const;  // table t's rank draw

 private:
  // A tabulated popularity rank: its id and the id's table effect.
  struct RankRow {
    int64_t id;
    double effect;
  };
  // Samples [first, first + count) of the split: dense [count, num_dense] row-major, labels
  // [count], table t's length of sample i at lengths[t * lengths_stride + i] (a KJT's
  // table-major lengths when the stride is the batch size), table t's ids appended to ids[t];
  // probability and dense_logit [count] when not null.
  void generate(Split split, int64_t first, int64_t count, float* dense, float* labels,
                int64_t* lengths, int64_t lengths_stride, std::vector<int64_t>* ids,
                double* probability, double* dense_logit) const;
  // The `length` ids of table t's bag in a sample's stream (words from `id_word` on, `base` its
  // state) written to out; returns the sum of their table effects.
  double draw_bag(size_t t, uint64_t base, uint64_t id_word, size_t length, int64_t* out) const;
  // The batch of dense, labels, lengths [num_sparse * count] and every table's ids.
  Batch assemble(Tensor dense, Tensor labels, Tensor lengths,
                 const std::vector<std::vector<int64_t>>& ids, int64_t count) const;

  SyntheticCriteoConfig config_;
  std::vector<double> w_;
  std::vector<int64_t> multiplier_;  // a_t
  std::vector<int64_t> offset_;      // b_t
  std::vector<detail::PowerLawRanks> ranks_;  // per table
  std::vector<std::vector<RankRow>> rows_;    // per table, its tabulated ranks
  std::vector<double> extra_cdf_;            // the CDF of the extra ids' Poisson count
  double sparse_factor_ = 0;                 // sparse_scale / sqrt(num_sparse)
  std::vector<std::string> keys_;            // cat_0 ..
};

// A rank's stream over one split (`data` is referenced: it must outlive the source). The
// concatenation, in rank order, of every rank's s-th batch is data.batch(split, s * W * B, W * B)
// (full batches): what an unsharded single-process reference trains on at step s.
//
// fill_waits: the next batch is drawn a few samples at a time while the thread that calls
// next_batch() waits for a collective (ferry's waits run such work in place of polling), and
// next_batch() draws only what is left. This is for ranks with no spare core: a loader thread
// (PrefetchingSource) would take the core from its rank at moments the scheduler picks, while
// this uses the time the rank would have idled. The batches are the same either way. Such a
// source is used by one thread at a time; the waits of the thread that last called
// next_batch() fill it.
class SyntheticCriteoSource : public BatchSource {
 public:
  SyntheticCriteoSource(const SyntheticCriteo& data, Split split, const ShardOptions& options,
                        bool fill_waits = false);
  ~SyntheticCriteoSource() override;
  SyntheticCriteoSource(const SyntheticCriteoSource&) = delete;
  SyntheticCriteoSource& operator=(const SyntheticCriteoSource&) = delete;

  std::optional<Batch> next_batch() override;
  int64_t num_batches() const override { return schedule_.num_batches(); }
  void reset() override;

  // Samples drawn in waits so far (what next_batch() did not have to draw itself); may be read
  // from any thread.
  int64_t samples_drawn_in_waits() const;

 private:
  struct WaitFill;  // the batch in progress, shared with the thread's wait hook
  // The hook: one piece of the batch in progress (it holds the state weakly).
  static std::function<bool()> draw_a_piece(const std::shared_ptr<WaitFill>& fill);

  const SyntheticCriteo* data_;
  Split split_;
  ShardSchedule schedule_;
  int64_t next_ = 0;
  std::shared_ptr<WaitFill> fill_;  // null without fill_waits
};

}  // namespace ferry::torchrec
