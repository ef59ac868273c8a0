// ferry::detail::TaskQueue: a group worker's FIFO of tasks and the times they were queued
// (internal).
//
// A ring over one array that grows and never shrinks: a std::deque allocates a block each time
// its end crosses into a new one and frees it when its start leaves it, so a queue one or two
// tasks deep cost an allocation every few tasks forever. Here the array reaches the deepest the
// queue has been and stays.
#pragma once

#include <ferry/collectives/engine/task.h>

#include <chrono>
#include <cstddef>
#include <utility>
#include <vector>

namespace ferry::detail {

class TaskQueue {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  bool empty() const { return count_ == 0; }
  void push(Task task, TimePoint queued_at) {
    if (count_ == slots_.size()) grow();
    Slot& s = slots_[(head_ + count_) % slots_.size()];
    s.task = std::move(task);
    s.queued_at = queued_at;
    count_ += 1;
  }
  // When the oldest task was queued; not empty.
  TimePoint front_queued_at() const { return slots_[head_].queued_at; }
  // Takes the oldest task out; not empty.
  Task pop() {
    Task task = std::move(slots_[head_].task);
    head_ = (head_ + 1) % slots_.size();
    count_ -= 1;
    return task;
  }

 private:
  struct Slot {
    Task task;
    TimePoint queued_at{};
  };
  void grow() {
    std::vector<Slot> bigger(slots_.empty() ? 8 : 2 * slots_.size());
    for (size_t i = 0; i < count_; ++i) {
      Slot& from = slots_[(head_ + i) % slots_.size()];
      bigger[i].task = std::move(from.task);
      bigger[i].queued_at = from.queued_at;
    }
    slots_ = std::move(bigger);
    head_ = 0;
  }

  std::vector<Slot> slots_;
  size_t head_ = 0;
  size_t count_ = 0;
};

}  // namespace ferry::detail
