// ferry::torchrec::PrefetchingSource: a BatchSource that runs another one on a background
// thread, so that the next batches are generated or parsed while the training step computes.
//
// Contract:
//   Order      next_batch() returns exactly the inner source's batches, in its order, then
//              std::nullopt (again on every later call, until reset()). One thread, started by
//              the constructor and by reset(), calls the inner source's next_batch() and keeps
//              at most `capacity` finished batches in a queue; it blocks (condition variable)
//              while the queue is full and ends after the inner source's std::nullopt or error.
//   Errors     an exception the inner next_batch() throws reaches the consumer at the position
//              where it happened: the batches before it are returned first, then next_batch()
//              rethrows it, and rethrows it again on every later call until reset() (the inner
//              source's state after a throw is unknown, so nothing more is read from it).
//   reset()    stops the thread (waking it if it waits for space; a batch the inner source is
//              producing at that moment is finished and dropped), discards the queue, calls the
//              inner reset() on the caller's thread and starts a new thread at the first batch:
//              no batch of the previous pass reaches the new one. An exception from the inner
//              reset() propagates, and next_batch() then rethrows it until a reset() succeeds.
//   Destructor stops and joins the thread the same way, whether or not the batches were
//              consumed.
//   num_batches() is the inner source's, read once by the constructor (the inner source is
//              not called concurrently from the consumer's thread).
//   Threads    next_batch(), reset(), stats() and destruction are the consumer's: call them
//              from one thread at a time. The inner source is used by the loader thread only,
//              and by reset() while no loader thread runs; nothing else may use it meanwhile.
//              A reference-constructed source's inner object must outlive this one.
// Every wait blocks on a condition variable (no spinning: 2-4 ranks share 2 cores here), and
// every wait can end: the consumer's waits for a batch that the running thread always delivers
// (a batch, the end or an error), the thread's for space that next_batch(), reset() or the
// destructor make.
//
// Time spent waiting: a caller that times next_batch() measures only the wait for a batch
// (popping a ready one costs a lock); stats() also counts the calls that had to wait and the
// time they waited, in this object's lifetime.
#pragma once

#include <ferry/collectives/torchrec/datasets/batch.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

namespace ferry::torchrec {

// The loader thread's scheduling class. Idle (Linux's SCHED_IDLE) runs the thread only on a
// core that has nothing else to run: for ranks that fill the host's cores, the batches are then
// made in the moments a rank blocks in a wait, and a rank that wakes takes its core back at
// once, where a thread of normal priority competes with the ranks for their cores. Nothing else
// changes (same batches, same order). On a host whose cores are kept busy by other work, an
// idle loader makes little progress and the consumer waits for its batches. Where the class
// cannot be set, the thread keeps normal priority.
enum class LoaderPriority { Normal, Idle };

class PrefetchingSource : public BatchSource {
 public:
  static constexpr int64_t kDefaultCapacity = 3;

  // Owns the inner source. capacity >= 1 batches are prepared ahead.
  explicit PrefetchingSource(std::unique_ptr<BatchSource> inner,
                             int64_t capacity = kDefaultCapacity,
                             LoaderPriority priority = LoaderPriority::Normal);
  // References the inner source, which must outlive this object.
  explicit PrefetchingSource(BatchSource& inner, int64_t capacity = kDefaultCapacity,
                             LoaderPriority priority = LoaderPriority::Normal);
  ~PrefetchingSource() override;

  PrefetchingSource(const PrefetchingSource&) = delete;
  PrefetchingSource& operator=(const PrefetchingSource&) = delete;

  std::optional<Batch> next_batch() override;
  int64_t num_batches() const override { return num_batches_; }
  void reset() override;

  int64_t capacity() const { return capacity_; }
  LoaderPriority priority() const { return priority_; }

  struct Stats {
    int64_t batches = 0;      // returned by next_batch()
    int64_t waits = 0;        // next_batch() calls that found the queue empty and blocked
    double wait_seconds = 0;  // the time those calls blocked
  };
  Stats stats() const { return stats_; }

 private:
  // One entry of the queue: a batch, the end of the pass, or the inner source's exception.
  struct Item {
    std::optional<Batch> batch;
    std::exception_ptr error;
  };

  void start();
  void stop();  // wakes and joins the thread, empties the queue
  void run();   // the loader thread

  std::unique_ptr<BatchSource> owned_;
  BatchSource* inner_;
  int64_t capacity_;
  LoaderPriority priority_;
  int64_t num_batches_;

  std::mutex mutex_;
  std::condition_variable ready_;  // the queue got an item (the consumer waits)
  std::condition_variable space_;  // the queue lost one, or stop_ was set (the thread waits)
  std::deque<Item> queue_;
  bool stop_ = false;
  std::thread thread_;

  // The consumer's state.
  bool finished_ = false;           // the end or an error was returned; the thread has ended
  std::exception_ptr error_;        // rethrown by next_batch() once finished_
  Stats stats_;
};

}  // namespace ferry::torchrec
