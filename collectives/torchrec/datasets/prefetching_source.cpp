#include <ferry/collectives/torchrec/datasets/prefetching_source.h>

#include <ferry/runtime/error.h>

#include <sched.h>

#include <chrono>
#include <utility>

namespace ferry::torchrec {

PrefetchingSource::PrefetchingSource(std::unique_ptr<BatchSource> inner, int64_t capacity,
                                     LoaderPriority priority)
    : owned_(std::move(inner)),
      inner_(owned_.get()),
      capacity_(capacity),
      priority_(priority),
      num_batches_(0) {
  FERRY_CHECK(inner_ != nullptr, InvalidArgument,
              "PrefetchingSource: expected an inner source, got a null pointer");
  FERRY_CHECK(capacity_ >= 1, InvalidArgument,
              "PrefetchingSource: capacity must be >= 1 batch, got ", capacity_);
  num_batches_ = inner_->num_batches();
  start();
}

PrefetchingSource::PrefetchingSource(BatchSource& inner, int64_t capacity,
                                     LoaderPriority priority)
    : inner_(&inner), capacity_(capacity), priority_(priority), num_batches_(0) {
  FERRY_CHECK(capacity_ >= 1, InvalidArgument,
              "PrefetchingSource: capacity must be >= 1 batch, got ", capacity_);
  num_batches_ = inner_->num_batches();
  start();
}

PrefetchingSource::~PrefetchingSource() { stop(); }

void PrefetchingSource::start() {
  stop_ = false;
  finished_ = false;
  error_ = nullptr;
  try {
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    // No thread will ever deliver a batch: make next_batch() say why instead of waiting.
    finished_ = true;
    error_ = std::current_exception();
    throw;
  }
}

void PrefetchingSource::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  space_.notify_all();
  if (thread_.joinable()) thread_.join();
  queue_.clear();
}

void PrefetchingSource::reset() {
  stop();
  try {
    inner_->reset();
  } catch (...) {
    finished_ = true;
    error_ = std::current_exception();
    throw;
  }
  start();
}

std::optional<Batch> PrefetchingSource::next_batch() {
  if (finished_) {
    if (error_) std::rethrow_exception(error_);
    return std::nullopt;
  }
  Item item;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (queue_.empty()) {
      // The thread runs until it has queued the end or an error, so this wait ends.
      const auto t0 = std::chrono::steady_clock::now();
      ready_.wait(lock, [this] { return !queue_.empty(); });
      ++stats_.waits;
      stats_.wait_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    item = std::move(queue_.front());
    queue_.pop_front();
  }
  space_.notify_one();
  if (item.error) {
    finished_ = true;
    error_ = item.error;
    std::rethrow_exception(error_);
  }
  if (!item.batch) {
    finished_ = true;
    return std::nullopt;
  }
  ++stats_.batches;
  return std::move(item.batch);
}

void PrefetchingSource::run() {
  if (priority_ == LoaderPriority::Idle) {
    // Linux applies the class to the calling thread only. A failure leaves normal priority.
    sched_param none{};
    (void)sched_setscheduler(0, SCHED_IDLE, &none);
  }
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      space_.wait(lock, [this] {
        return stop_ || static_cast<int64_t>(queue_.size()) < capacity_;
      });
      if (stop_) return;
    }
    // The inner source runs outside the lock: the consumer takes ready batches meanwhile.
    Item item;
    try {
      item.batch = inner_->next_batch();
    } catch (...) {
      item.error = std::current_exception();
    }
    const bool last = item.error || !item.batch;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_) return;  // reset() or the destructor discards the queue anyway
      queue_.push_back(std::move(item));
    }
    ready_.notify_one();
    if (last) return;
  }
}

}  // namespace ferry::torchrec
