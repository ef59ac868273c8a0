// ferry::torchrec::Batch and the sharded batch schedule shared by the data sources
// (synthetic_criteo.h, criteo_tsv.h).
//
// A Batch is one rank's mini-batch: dense [B, num_dense] float32, sparse a KJT with one key per
// sparse feature ("cat_0", "cat_1", ...) and stride B (int64 lengths), labels [B] float32 in
// {0, 1}.
//
// Sharding (ShardOptions): a split of N samples is cut, in order, into local batches of
// batch_size samples: batch k holds samples [k * B, min((k + 1) * B, N)). Batch k belongs to
// rank k % world_size, so global step s is batches s*W .. s*W + W-1 (a global batch of W * B
// samples) and rank r's s-th batch is k = s * W + r. A rank generates / parses only its own
// batches.
//   drop_last (default true): a final batch shorter than B is dropped; false keeps it.
//   even_batches (default true): every rank gets floor(batches / W) batches, so all ranks end at
//     the same step (the trailing batches that would make ranks uneven are dropped). false gives
//     every batch to its rank: ranks then differ by one batch when the batch count is not a
//     multiple of W (what a pipeline must survive; with drop_last false one rank's last batch
//     may also be short).
#pragma once

#include <ferry/collectives/torchrec/sparse/keyed_jagged_tensor.h>
#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ferry::torchrec {

struct Batch {
  Tensor dense{};              // [B, num_dense] float32
  KeyedJaggedTensor sparse{};  // keys cat_0.., stride B
  Tensor labels{};             // [B] float32, 0 or 1
  int64_t size() const { return labels.defined() ? labels.numel() : 0; }
};

struct ShardOptions {
  int64_t batch_size = 512;  // per rank
  int rank = 0;
  int world_size = 1;
  bool drop_last = true;
  bool even_batches = true;
};

// Which samples a rank's batches hold, for a split of num_samples samples.
class ShardSchedule {
 public:
  ShardSchedule(int64_t num_samples, const ShardOptions& options);  // validates the options
  int64_t num_batches() const { return mine_; }  // this rank's
  // First sample and size of this rank's i-th batch (i < num_batches()).
  int64_t first_sample(int64_t i) const;
  int64_t batch_size(int64_t i) const;
  const ShardOptions& options() const { return options_; }

 private:
  int64_t n_ = 0;
  ShardOptions options_;
  int64_t mine_ = 0;
};

// The default sparse feature names: cat_0 .. cat_{n-1}.
std::vector<std::string> criteo_sparse_keys(int64_t num_sparse);

// A rank's stream of batches; std::nullopt once its batches are exhausted (until reset()).
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual std::optional<Batch> next_batch() = 0;
  virtual int64_t num_batches() const = 0;  // this rank's, per pass
  virtual void reset() = 0;                 // back to this rank's first batch
};

namespace detail {
// Accumulates samples (in order) and builds a Batch.
class BatchBuilder {
 public:
  BatchBuilder(int64_t num_dense, std::vector<std::string> keys, int64_t capacity);
  // dense: num_dense values; bags[t]: table t's ids.
  void add(const std::vector<float>& dense, const std::vector<std::vector<int64_t>>& bags,
           float label);
  Batch finish();

 private:
  int64_t num_dense_;
  std::vector<std::string> keys_;
  std::vector<float> dense_;
  std::vector<float> labels_;
  std::vector<std::vector<int64_t>> ids_;      // per key
  std::vector<std::vector<int64_t>> lengths_;  // per key
};
}  // namespace detail

}  // namespace ferry::torchrec
