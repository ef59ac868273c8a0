#include <ferry/collectives/engine/in_flight_work.h>

#include <ferry/collectives/engine/op_context.h>
#include <ferry/collectives/engine/queued_work.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>
#include <ferry/runtime/progress.h>

#include <algorithm>
#include <utility>

namespace ferry::detail {
namespace {

// Most small native collectives finish within microseconds of being waited for: such an op is
// polled this long first, and the full wait (the diagnosis of absent ranks, poisoning) set up
// only after (InFlight::polls_first).
constexpr auto kQuickPoll = std::chrono::microseconds(20);
// A caller's own shorter timeout polls in slices this long.
constexpr auto kSlice = std::chrono::milliseconds(50);
// How long an op handed to background progress on a host with no core to spare is left to its
// waiter before the progress thread first tests it (then as often as it tests any op).
constexpr auto kUnwaitedFirstLook = std::chrono::microseconds(10000);
// A waiter that finds the drive lock taken waits for the op's completion, trying the lock again
// after this, doubling up to kLongestDriveSlice: a test holds the lock for microseconds, a
// driver until the op completed (which wakes the waiter at once).
constexpr auto kFirstDriveSlice = std::chrono::microseconds(20);
constexpr auto kLongestDriveSlice = std::chrono::milliseconds(1);

void keep_for_life(KeptBuffers keep) {
  static std::mutex mu;
  static auto* kept = new std::vector<KeptBuffers>();  // never destroyed, on purpose
  std::lock_guard<std::mutex> lock(mu);
  kept->push_back(std::move(keep));
}

}  // namespace

std::exception_ptr after_failure(GroupImpl* group, std::exception_ptr error, OnFailure policy,
                                 KeptBuffers& keep) {
  bool tell_peers = policy == OnFailure::kPoisonTellPeers;
  try {
    std::rethrow_exception(error);
  } catch (const OwnDeadlineExpired&) {
    // Every rank stuck in the op times out by itself and names the absent ones: telling the
    // others now would race their own diagnosis.
    tell_peers = false;
  } catch (...) {
  }
  error = public_error(error);  // the public type for the caller
  if (policy == OnFailure::kPoisonKeepBuffers)
    keep_for_life(std::move(keep));  // the transport may write into them whenever peers arrive
  keep = {};
  if (group != nullptr && policy != OnFailure::kOpOnly) {
    const std::string why = error_message(error);
    group->poison(error, why);
    if (tell_peers) group->transport().abandon_group(group->id(), why);
  }
  return error;
}

InFlightWork::InFlightWork(OpDescription&& op, Clock::time_point deadline,
                           std::unique_ptr<InFlight> pending, KeptBuffers&& keep)
    : WorkState(std::string()), op_(std::move(op)), deadline_(deadline),
      pending_(std::move(pending)), keep_(std::move(keep)) {
  self_timed = deadline != Clock::time_point::max();
}

InFlightWork::~InFlightWork() {
  if (!pending_) return;
  auto group = op_.group.lock();
  if (!group) return;  // a group that ended has waited for it already (finish_before_group_ends)
  group->executor().enqueue([g = group.get(), op = op_.op, seq = op_.seq, deadline = deadline_,
                             pending = std::shared_ptr<InFlight>(std::move(pending_)),
                             keep = std::move(keep_)]() mutable {
    try {
      pending->wait_to_the_end(*g, op, seq, deadline);
      pending->finish();
    } catch (...) {
      if (pending->buffers_kept()) keep_for_life(std::move(keep));  // may still be written into
      after_failure(g, std::current_exception(), pending->on_failure(), keep);
    }
  });
}

void InFlightWork::DriveLock::refuse_second_lock() const {
  if (work_.driver_.load(std::memory_order_relaxed) == std::this_thread::get_id()) {
    FERRY_THROW(Error, work_.description(),
                ": tested or waited for by the thread that is driving it already");
  }
}

void InFlightWork::DriveLock::lock() {
  refuse_second_lock();
  work_.drive_mu_.lock();
  work_.driver_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  held_ = true;
}

bool InFlightWork::DriveLock::try_lock() {
  refuse_second_lock();
  if (!work_.drive_mu_.try_lock()) return false;
  work_.driver_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  held_ = true;
  return true;
}

void InFlightWork::DriveLock::unlock() {
  if (!held_) return;
  const bool due = std::exchange(work_.hooks_due_, false);
  held_ = false;
  work_.driver_.store(std::thread::id(), std::memory_order_relaxed);
  work_.drive_mu_.unlock();
  if (due) work_.run_completion_hooks();
}

std::unique_ptr<InFlight> InFlightWork::take_pending() {
  DriveLock drive(*this);
  drive.lock();
  return std::move(pending_);
}

bool InFlightWork::lock_drive(DriveLock& drive, Clock::time_point deadline, bool& completed) {
  // try_lock in a loop around a bounded wait for the completion flag, rather than a timed lock:
  // the completion wakes the waiter at once, and the lock is one every tool understands.
  Clock::duration slice = kFirstDriveSlice;
  completed = false;
  while (!drive.try_lock()) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_until(lock, std::min(deadline, now + slice), [&] { return done_.load(); })) {
      completed = true;
      return false;
    }
    slice = std::min<Clock::duration>(2 * slice, kLongestDriveSlice);
  }
  return true;
}

bool InFlightWork::progress(Mover who, std::chrono::milliseconds timeout,
                            const std::shared_ptr<WorkState>& self) {
  switch (who) {
    case Mover::kTester: return test();
    case Mover::kNobody: {
      if (!self_timed) return false;
      auto group = op_.group.lock();
      if (!group) return false;
      if (group->ranks_fill_cores()) {
        // No core to spare: the group's worker could drive the op only on a rank's core, and
        // would contend with the rank for the transport (MPICH serialises its threads' calls);
        // the rank's own wait moves it instead, as MPI's and Gloo's requests move only in their
        // waits (and a Work dropped unwaited is finished by its group). Only an op with a
        // completion hook (a Work::then callback, which must run though nobody waits) is
        // watched, by the progress thread, from kUnwaitedFirstLook on. 2 MPI ranks on 2 cores,
        // DLRM step at batch 512: 4.50 ms against 5.06 with the worker driving (six alternated
        // rounds).
        if (has_completion_hooks()) detail::progress_in_background(self, nullptr, kUnwaitedFirstLook);
        return true;
      }
      group->executor().enqueue(
          [work = std::static_pointer_cast<InFlightWork>(self), g = group.get()] {
            DriveLock drive(*work);
            drive.lock();
            if (work->pending_) work->drive_to_the_end(*g);
          });
      return true;
    }
    case Mover::kWaiter:
    case Mover::kHelper: break;
  }
  // One look first, as a tester's: an op whose peers are there already (a rank that came last
  // to a small collective) completes without the clock reads and set-up of a wait. Only an op
  // whose wait polls first anyway (a native request, shared memory).
  if (test(/*only_if_polled=*/true)) return true;
  const Clock::time_point now = Clock::now();  // one read for the deadline and the quick poll
  if (wait(deadline_after(timeout, now), now)) return true;
  give_up(expired_wait(timeout));
  return false;
}

bool InFlightWork::test(bool only_if_polled) {
  if (is_completed()) return true;
  DriveLock drive(*this);
  if (!drive.try_lock() || !pending_) return is_completed();
  if (only_if_polled && !pending_->polls_first()) return false;
  try {
    if (!pending_->test()) return false;
  } catch (...) {
    fail_op(std::current_exception());
    return true;
  }
  settle();
  return true;
}

bool InFlightWork::wait(Clock::time_point deadline, Clock::time_point now) {
  DriveLock drive(*this);
  bool completed = false;
  if (!lock_drive(drive, deadline, completed)) return completed;
  if (!pending_) {  // settled already
    drive.unlock();
    return await(deadline);
  }
  try {
    if (pending_->polls_first() &&
        pending_->poll_until(std::min({deadline, deadline_, now + kQuickPoll}))) {
      settle();
      return true;
    }
    if (deadline < deadline_) {
      // A caller's own shorter timeout (Work::wait(ms)): poll; on expiry the caller gives up
      // (give_up poisons the group) and the op stays in flight for a later wait (or the
      // group's end) to finish.
      while (!pending_->poll_until(std::min(deadline, Clock::now() + kSlice))) {
        if (Clock::now() >= deadline) return false;
      }
      settle();
      return true;
    }
  } catch (...) {
    fail_op(std::current_exception());
    return true;
  }
  if (auto group = op_.group.lock()) {
    drive_to_the_end(*group);
    return true;
  }
  drive.unlock();
  return await(deadline);  // the group ended: it finished the op
}

void InFlightWork::give_up(const std::string& why) {
  auto group = op_.group.lock();
  if (!group) return;
  poison_after_wait_timeout(*group, why);
  DriveLock drive(*this);
  drive.lock();
  if (pending_ && pending_->on_failure() == OnFailure::kPoisonTellPeers) drive_to_the_end(*group);
}

void InFlightWork::finish_before_group_ends(GroupImpl& group) {
  // The group's last handle can be the one its op's driver took for the drive (wait_until,
  // fail_op), released while this thread still holds the drive lock: the group then ends on the
  // driving thread, whose frame finishes the op. Locking again would refuse (an exception out of
  // the group's destructor: the process terminated).
  if (driver_.load(std::memory_order_relaxed) == std::this_thread::get_id()) return;
  DriveLock drive(*this);
  drive.lock();
  if (pending_) drive_to_the_end(group);
}

void InFlightWork::settle() {
  std::vector<Tensor> outputs;
  try {
    outputs = pending_->finish();
  } catch (...) {
    fail_op(std::current_exception());
    return;
  }
  release();
  FERRY_LOG(Trace, "coll", description(), " done");
  hooks_due_ = mark_completed(std::move(outputs));
}

void InFlightWork::drive_to_the_end(GroupImpl& group) {
  try {
    pending_->wait_to_the_end(group, op_.op, op_.seq, deadline_);
  } catch (...) {
    fail_op(std::current_exception());
    return;
  }
  settle();
}

void InFlightWork::fail_op(std::exception_ptr error) {
  const OnFailure policy = pending_->on_failure();
  if (pending_->buffers_kept()) keep_for_life(std::move(keep_));  // may still be written into
  auto group = op_.group.lock();
  error = after_failure(group.get(), std::move(error), policy, keep_);
  release();
  hooks_due_ = mark_failed(error);
}

void InFlightWork::release() {
  pending_.reset();
  for (auto& k : keep_) k.reset();  // most are empty: no temporary array to assign from
}

}  // namespace ferry::detail
