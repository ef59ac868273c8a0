#include <ferry/collectives/torchrec/datasets/caching_source.h>

#include <ferry/collectives/torchrec/sparse/keyed_jagged_tensor.h>
#include <ferry/runtime/error.h>

#include <utility>

namespace ferry::torchrec {

namespace {

Tensor copy_of(const Tensor& t) { return t.defined() ? t.clone() : Tensor(); }

// A batch whose tensors are copies: the cache and the caller never share storage.
Batch copy_of(const Batch& b) {
  Batch out;
  out.dense = copy_of(b.dense);
  out.labels = copy_of(b.labels);
  const KeyedJaggedTensor& k = b.sparse;
  KjtInit init;
  init.keys = k.keys();
  init.values = copy_of(k.values());
  init.weights = copy_of(k.weights_or_none());
  init.lengths = copy_of(k.lengths());
  init.allow_duplicate_keys = k.allows_duplicate_keys();
  if (k.variable_stride_per_key()) {
    init.stride_per_key_per_rank = k.stride_per_key_per_rank();
    init.inverse_indices = k.inverse_indices();
  } else {
    init.stride = k.stride();
  }
  // The per-key counts are the original's, so the copy's lengths need no second check.
  out.sparse = detail::kjt_with_checked_lengths(std::move(init), k.length_per_key(),
                                                "CachingSource");
  return out;
}

int64_t bytes_of(const Tensor& t) { return t.defined() ? t.nbytes() : 0; }

}  // namespace

CachingSource::CachingSource(std::unique_ptr<BatchSource> inner, int64_t budget_bytes)
    : inner_(std::move(inner)), budget_(budget_bytes) {
  FERRY_CHECK(inner_ != nullptr, InvalidArgument, "CachingSource: expected a source, given null");
  FERRY_CHECK(budget_bytes >= 0, InvalidArgument,
              "CachingSource: the budget must be >= 0 bytes, given ", budget_bytes);
  num_batches_ = inner_->num_batches();
  keeping_ = budget_ > 0;
}

int64_t CachingSource::batch_bytes(const Batch& b) {
  const KeyedJaggedTensor& k = b.sparse;
  return bytes_of(b.dense) + bytes_of(b.labels) + bytes_of(k.values()) +
         bytes_of(k.weights_or_none()) + bytes_of(k.lengths());
}

void CachingSource::drop_cache() {
  std::vector<Batch>().swap(cache_);  // the memory goes back now
  bytes_ = 0;
  keeping_ = false;
}

std::optional<Batch> CachingSource::next_batch() {
  read_since_reset_ = true;
  if (complete_) {
    if (next_ >= cache_.size()) return std::nullopt;
    return copy_of(cache_[next_++]);
  }
  std::optional<Batch> b;
  try {
    b = inner_->next_batch();
  } catch (...) {
    drop_cache();
    throw;
  }
  if (!b) {
    complete_ = keeping_;
    next_ = cache_.size();  // this pass is over
    keeping_ = false;
    return std::nullopt;
  }
  if (keeping_) {
    const int64_t bytes = batch_bytes(*b);
    if (bytes_ + bytes > budget_) {
      over_budget_ = true;
      drop_cache();
    } else {
      cache_.push_back(copy_of(*b));
      bytes_ += bytes;
    }
  }
  return b;
}

void CachingSource::reset() {
  next_ = 0;
  // Nothing read since the start (or the last reset): the inner source is at its first batch,
  // and a loader thread below may have the first ones ready.
  if (complete_ || !read_since_reset_) return;
  read_since_reset_ = false;
  // A pass cut short (or outgrown): forward again from the first batch, keeping them unless a
  // pass has already outgrown the budget.
  drop_cache();
  inner_->reset();
  keeping_ = budget_ > 0 && !over_budget_;
}

}  // namespace ferry::torchrec
