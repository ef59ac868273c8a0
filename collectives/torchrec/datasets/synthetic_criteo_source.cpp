#include <ferry/collectives/torchrec/datasets/synthetic_criteo.h>

#include <ferry/runtime/idle_work.h>

#include <atomic>
#include <exception>
#include <thread>
#include <utility>

namespace ferry::torchrec {

namespace {
// Samples per piece of wait-time work: about 10-30 us of drawing here, so a wait that ends
// meanwhile is noticed that much late at most.
constexpr int64_t kSamplesPerPiece = 8;
}  // namespace

struct SyntheticCriteoSource::WaitFill {
  explicit WaitFill(const SyntheticCriteo& data) : pending(data) {}
  SyntheticCriteo::BatchInProgress pending;
  int64_t pending_index = -1;  // the batch `pending` holds
  // Whose waits draw it (the last caller of next_batch): a hook left on another thread reads
  // it, hence atomic.
  std::atomic<std::thread::id> thread;
  std::atomic<int64_t> drawn_in_waits{0};  // read by other threads (tests, progress output)
  std::exception_ptr error;  // a piece's failure, raised by the next next_batch()
};

// A hook left on a thread after its source is gone (or moved to another thread) does nothing.
std::function<bool()> SyntheticCriteoSource::draw_a_piece(
    const std::shared_ptr<WaitFill>& fill) {
  return [weak = std::weak_ptr<WaitFill>(fill)] {
    const std::shared_ptr<WaitFill> f = weak.lock();
    if (!f || f->thread != std::this_thread::get_id() || f->error || !f->pending.started() ||
        f->pending.done()) {
      return false;
    }
    try {
      f->drawn_in_waits += f->pending.advance(kSamplesPerPiece);
    } catch (...) {
      f->error = std::current_exception();
    }
    return true;
  };
}

SyntheticCriteoSource::SyntheticCriteoSource(const SyntheticCriteo& data, Split split,
                                             const ShardOptions& options, bool fill_waits)
    : data_(&data), split_(split), schedule_(data.num_samples(split), options) {
  if (fill_waits) fill_ = std::make_shared<WaitFill>(data);
}

SyntheticCriteoSource::~SyntheticCriteoSource() {
  // Another thread's hook only holds a weak reference: it finds the source gone and idles.
  if (fill_) ferry::detail::clear_idle_work(fill_.get());
}

void SyntheticCriteoSource::reset() {
  next_ = 0;
  if (fill_) fill_->pending_index = -1;
}

int64_t SyntheticCriteoSource::samples_drawn_in_waits() const {
  return fill_ ? fill_->drawn_in_waits.load() : 0;
}

std::optional<Batch> SyntheticCriteoSource::next_batch() {
  if (next_ >= schedule_.num_batches()) return std::nullopt;
  const int64_t i = next_++;
  if (!fill_) return data_->batch(split_, schedule_.first_sample(i), schedule_.batch_size(i));

  WaitFill& f = *fill_;
  // (Re)registered unless the hook is ours: another source (the evaluation's) may have taken
  // the thread's hook since the last call.
  f.thread = std::this_thread::get_id();
  if (!ferry::detail::idle_work_registered_by(fill_.get())) {
    ferry::detail::set_idle_work(draw_a_piece(fill_), fill_.get());
  }
  if (f.error) std::rethrow_exception(std::exchange(f.error, nullptr));
  if (f.pending_index != i || !f.pending.started()) {
    f.pending.start(split_, schedule_.first_sample(i), schedule_.batch_size(i));
  }
  Batch batch = f.pending.finish();
  f.pending_index = -1;
  if (next_ < schedule_.num_batches()) {
    f.pending.start(split_, schedule_.first_sample(next_), schedule_.batch_size(next_));
    f.pending_index = next_;
  }
  return batch;
}

}  // namespace ferry::torchrec
