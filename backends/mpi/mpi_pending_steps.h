// A process-wide list of MPI steps that a rank owes its peers and that only this process can
// make (all_reduce's second round of the point-to-point path, a persistent request's first
// start): internal to the MPI backend.
//
// MPI progresses its own collectives inside any MPI call, so ferry makes these steps the same
// way: every ferry test of an MPI request steps the list (advance(); cheap, one atomic load,
// when it is empty), and so does the process's progress thread while the list is not empty, for
// a rank that makes no ferry call at all (it waits in another op, a ferry recv or the user's
// own MPI_Barrier) while its peers wait for it. The thread stops before MPI_Finalize;
// mpi_usable() covers a wake after it.
#pragma once

#include <ferry/backends/mpi/mpi_error.h>
#include <ferry/runtime/progress.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

namespace ferry::detail {

// `Step` is called as step(T&) with the list's lock held; it makes what it can without
// waiting and returns true once the item owes nothing more (it is then forgotten).
template <class T, class Step>
class PendingMpiSteps final : public BackgroundPoller {
 public:
  PendingMpiSteps() { add_background_poller(this); }

  void add(std::shared_ptr<T> item) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      list_.push_back(std::move(item));
      count_.store(list_.size(), std::memory_order_relaxed);
    }
    wake_background_progress();
  }

  // Steps every listed item and forgets the finished ones. A thread that finds another one at
  // it leaves the work to that one.
  void advance() {
    if (count_.load(std::memory_order_relaxed) == 0 || !mpi_usable()) return;
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return;
    std::erase_if(list_, [](const std::shared_ptr<T>& item) { return Step{}(*item); });
    count_.store(list_.size(), std::memory_order_relaxed);
  }

  void remove(const T* item) {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(list_, [item](const std::shared_ptr<T>& i) { return i.get() == item; });
    count_.store(list_.size(), std::memory_order_relaxed);
  }

  bool poll() override {
    advance();
    return count_.load(std::memory_order_relaxed) != 0 && mpi_usable();
  }

 private:
  std::mutex mu_;  // taken before an item's own locks
  std::vector<std::shared_ptr<T>> list_;
  std::atomic<size_t> count_{0};
};

}  // namespace ferry::detail
