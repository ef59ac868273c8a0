#include <ferry/collectives/engine/native_issue.h>

#include <ferry/runtime/config.h>
#include <ferry/runtime/log.h>

namespace ferry::detail {

namespace {

// The Work of a native collective started at issue: whoever waits drives its request (MPI
// progresses only inside MPI calls), one thread at a time; the others wait for the drive lock in
// short slices, so none of them sleeps while the request is left unpolled.
class NativeWork final : public WorkState, public InFlightNative {
 public:
  NativeWork(OpDescription description, Clock::time_point deadline,
             std::unique_ptr<NativeRequest> request, KeptBuffers keep)
      : WorkState(std::string()), op_(std::move(description)), deadline_(deadline),
        request_(std::move(request)), keep_(std::move(keep)) {}

  std::string description() const override { return op_.format(); }

  void wait_timed_out(const std::string& why) override {
    if (auto group = op_.group.lock()) poison_after_wait_timeout(*group, why);
  }

  ~NativeWork() override {
    if (!request_) return;
    // Dropped before it finished: MPI still owns the buffers, so the group's worker waits the
    // request out (under the op's deadline, like any queued op) and keeps them until then. (A
    // group that ended has already waited for it: see finish_before_group_ends.)
    if (auto group = op_.group.lock()) {
      group->executor().enqueue([g = group.get(), op = op_.op, seq = op_.seq, deadline = deadline_,
                                 request = std::shared_ptr<NativeRequest>(std::move(request_)),
                                 keep = std::move(keep_)]() mutable {
        try {
          OpContext ctx(*g, op, seq, deadline);
          ctx.uses_no_scratch();
          ctx.wait_native(std::unique_ptr<NativeRequest>(new Forward(std::move(request))), {});
        } catch (...) {
          keep_for_life(std::move(keep));  // MPI may still use them (see drive_to_the_end)
          const std::exception_ptr error = std::current_exception();
          g->poison(error, error_message(error));
        }
      });
    }
  }

  // Background progress for an op that must be tested to move: its group's worker drives it to
  // the end, as it would a queued op. The process's progress thread would instead wake up every
  // 50 us to 1 ms to test it; on a host with no core to spare (2 ranks on 2 cores) those
  // wake-ups took a core from a rank, and the KJT all-to-all over MPI cost twice as long.
  bool hand_off_progress(const std::shared_ptr<WorkState>& self) override {
    auto group = op_.group.lock();
    if (!group) return false;
    group->executor().enqueue([work = std::static_pointer_cast<NativeWork>(self), g = group.get()] {
      std::lock_guard<std::timed_mutex> drive(work->drive_mu_);
      if (work->request_) work->drive_to_the_end(*g);
    });
    return true;
  }

  bool is_completed() const override {
    if (WorkState::is_completed()) return true;
    std::unique_lock<std::timed_mutex> drive(drive_mu_, std::try_to_lock);
    if (!drive.owns_lock() || !request_ || !request_->test()) return false;
    const_cast<NativeWork*>(this)->settle();
    return true;
  }

  bool wait_until(Clock::time_point deadline, bool may_help) override {
    std::unique_lock<std::timed_mutex> drive(drive_mu_, std::defer_lock);
    while (!drive.try_lock_for(kDriveSlice)) {
      if (WorkState::is_completed()) return true;
      if (Clock::now() >= deadline) return false;
    }
    if (!request_) return WorkState::wait_until(deadline, may_help);  // settled already
    // Most small collectives finish within microseconds of being waited for: poll the request
    // directly first, and set up the full wait (the op's deadline with the diagnosis of absent
    // ranks, poisoning) only for one that takes longer.
    if (request_->wait_until(std::min({deadline, deadline_, Clock::now() + kQuickPoll}))) {
      settle();
      return true;
    }
    if (deadline < deadline_) {
      // A caller's own shorter timeout (Work::wait(ms)): poll; on expiry Work poisons the group
      // and the op stays in flight for a later wait (or the group's end) to finish.
      while (!request_->wait_until(std::min(deadline, Clock::now() + kSlice))) {
        if (Clock::now() >= deadline) return false;
      }
      settle();
      return true;
    }
    if (auto group = op_.group.lock()) {
      drive_to_the_end(*group);
      return true;
    }
    return WorkState::wait_until(deadline, may_help);  // the group ended: it finished us
  }

  void finish_before_group_ends(GroupImpl& group) override {
    std::lock_guard<std::timed_mutex> drive(drive_mu_);
    if (request_) drive_to_the_end(group);
  }

 private:
  static constexpr auto kSlice = std::chrono::milliseconds(50);
  static constexpr auto kQuickPoll = std::chrono::microseconds(20);
  static constexpr auto kDriveSlice = std::chrono::milliseconds(1);

  // Forwards to a request shared with the worker's cleanup task.
  class Forward final : public NativeRequest {
   public:
    explicit Forward(std::shared_ptr<NativeRequest> r) : r_(std::move(r)) {}
    bool test() override { return r_->test(); }
    bool wait_until(Clock::time_point d) override { return r_->wait_until(d); }
    void rethrow_if_failed() override { r_->rethrow_if_failed(); }
    void give_up() override { r_->give_up(); }

   private:
    std::shared_ptr<NativeRequest> r_;
  };

  // Waits under the op's deadline with the engine's diagnosis and poisoning, as the worker's
  // path does. Called with drive_mu_ held.
  void drive_to_the_end(GroupImpl& group) {
    try {
      OpContext ctx(group, op_.op, op_.seq, deadline_);
      ctx.uses_no_scratch();
      ctx.wait_native(std::move(request_), {});  // throws on timeout, poisoned, failure
      FERRY_LOG(Trace, "coll", description(), " done");
      keep_ = {};
      complete();
    } catch (...) {
      // A request given up at its deadline may still be written by MPI whenever the absent
      // peers arrive, so its buffers live as long as the process (which must end anyway); one
      // that failed outright would not need that, but telling the two apart is not worth it.
      keep_for_life(std::move(keep_));
      const std::exception_ptr error = public_error(std::current_exception());
      group.poison(error, error_message(error));
      fail(error);
    }
    request_.reset();
  }

  // The request finished: its outcome becomes the Work's. Called with drive_mu_ held.
  void settle() {
    std::unique_ptr<NativeRequest> request = std::move(request_);
    try {
      request->rethrow_if_failed();
      FERRY_LOG(Trace, "coll", description(), " done");
      keep_ = {};
      complete();
    } catch (...) {
      // A transport may fail an op it had to abandon (MPI's key check found the ranks' calls
      // differ while the op was in flight): MPI may still write into its buffers.
      keep_for_life(std::move(keep_));
      const std::exception_ptr error = std::current_exception();
      if (auto group = op_.group.lock()) group->poison(error, error_message(error));
      fail(error);
    }
  }

  static void keep_for_life(KeptBuffers keep) {
    static std::mutex mu;
    static auto* kept = new std::vector<KeptBuffers>();  // never destroyed, on purpose
    std::lock_guard<std::mutex> lock(mu);
    kept->push_back(std::move(keep));
  }

  OpDescription op_;  // formatted only when a message needs it
  Clock::time_point deadline_;
  mutable std::timed_mutex drive_mu_;  // held by the one thread testing or waiting on request_
  std::unique_ptr<NativeRequest> request_;
  // Everything the request reads or writes. Released before the Work completes: the caller
  // then holds the only handles (see submit.cpp).
  KeptBuffers keep_;
};

}  // namespace

NativeIssue::NativeIssue(const Group& group, const char* op)
    : handle_(group), group_(&group.impl()), op_(op) {
  // FERRY_CHECK=1 compares the call's fingerprint with the peers' before it starts, which the
  // worker's path (submit) does: nothing starts at issue then.
  if (group_->native() == nullptr || check_mode()) return;
  group_->throw_if_poisoned(op);
  lock_ = std::unique_lock<std::mutex>(group_->issue_mutex());
  // Ops queued before this one must start first: then this one is queued behind them.
  if (!group_->executor().idle()) lock_.unlock();
}

Work NativeIssue::finish(OpSummary what, KeptBuffers keep,
                         std::unique_ptr<NativeRequest> request, std::exception_ptr start_error) {
  const Clock::time_point deadline = Clock::now() + default_timeout();
  if (start_error) {
    const uint64_t seq = group_->take_sequence_number();
    lock_.unlock();
    auto state = std::make_shared<WorkState>(describe_op(op_, seq, std::move(what), handle_));
    group_->poison(start_error, error_message(start_error));
    state->fail(start_error);
    return Work(state);
  }
  const uint64_t seq = group_->take_sequence_number();
  lock_.unlock();
  auto state = std::make_shared<NativeWork>(OpDescription(op_, seq, std::move(what), handle_),
                                            deadline, std::move(request), std::move(keep));
  group_->track_in_flight(state);
  FERRY_LOG(Trace, "coll", state->description(), " started at issue");
  state->self_timed = true;
  return Work(state);
}

}  // namespace ferry::detail
