// ferry::torchrec::CachingSource: a BatchSource that keeps the batches of its first complete
// pass in memory and serves every later pass from there, as an in-memory dataset does.
//
// Training makes several passes (epochs) over the same samples, and a batch costs the same to
// make every time: drawing the synthetic data's 512 samples takes about a millisecond of one
// core, parsing Criteo TSV far more. Where the ranks fill the host's cores, that work is taken
// from the training step whichever thread does it. A split that fits in memory is made once.
//
// Contract:
//   Batches   the inner source's, in its order, on every pass. Each next_batch() returns a batch
//             of its own (its tensors are copies of the cached ones), so a caller that changes
//             a batch in place changes nothing that a later pass reads.
//   Pass 1    next_batch() forwards to the inner source and keeps a copy of each batch. When the
//             copies would exceed `budget_bytes`, they are dropped and the source forwards from
//             then on (over_budget()); so it does when a pass is cut short by reset() before
//             its end, after which the next pass tries again from the first batch.
//   Later     once a pass ended (the inner source's std::nullopt) with every batch kept, reset()
//             only rewinds: the inner source is not called again.
//   Errors    an exception of the inner source propagates; what was kept of that pass is
//             dropped, and the next reset() starts over.
//   Threads   one caller at a time, as every BatchSource.
#pragma once

#include <ferry/collectives/torchrec/datasets/batch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace ferry::torchrec {

class CachingSource : public BatchSource {
 public:
  CachingSource(std::unique_ptr<BatchSource> inner, int64_t budget_bytes);

  std::optional<Batch> next_batch() override;
  int64_t num_batches() const override { return num_batches_; }
  void reset() override;

  // Whether the batches come from memory (a complete pass was kept).
  bool serving_from_memory() const { return complete_; }
  // Bytes of the batches kept: the dense, label, id, length and weight tensors.
  int64_t cached_bytes() const { return bytes_; }
  // Whether a pass outgrew the budget (the source then only forwards).
  bool over_budget() const { return over_budget_; }

  // The bytes a batch's tensors hold.
  static int64_t batch_bytes(const Batch& b);

 private:
  void drop_cache();

  std::unique_ptr<BatchSource> inner_;
  int64_t budget_;
  int64_t num_batches_;
  std::vector<Batch> cache_;
  int64_t bytes_ = 0;
  bool complete_ = false;     // cache_ holds a whole pass
  bool over_budget_ = false;  // a pass did not fit: forward only
  bool keeping_ = true;       // this pass's batches are being kept
  size_t next_ = 0;           // the next cached batch to serve
  bool read_since_reset_ = false;
};

}  // namespace ferry::torchrec
