#include <ferry/collectives/ops/direct_issue.h>

#include <ferry/collectives/algorithms/algorithms.h>
#include <ferry/collectives/engine/native_issue.h>
#include <ferry/collectives/engine/op_context.h>
#include <ferry/collectives/engine/reduce_kernels.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/log.h>

#include <memory>
#include <mutex>
#include <thread>

namespace ferry::detail {
namespace {

// The Work of a direct all_reduce started at issue: whoever waits or tests completes its
// exchange and combines the payloads, one thread at a time.
class DirectAllReduceWork final : public WorkState, public InFlightNative {
 public:
  DirectAllReduceWork(OpDescription op, Clock::time_point deadline,
                      std::unique_ptr<OpContext> ctx, std::unique_ptr<char[]> gathered,
                      const char* in, char* out, size_t count, ReduceSpec spec, KeptBuffers keep)
      : WorkState(std::string()), op_(std::move(op)), deadline_(deadline), ctx_(std::move(ctx)),
        gathered_(std::move(gathered)), in_(in), out_(out), count_(count), spec_(spec),
        keep_(std::move(keep)) {}

  ~DirectAllReduceWork() override {
    if (!ctx_) return;
    // Dropped before it finished: the op still runs to the end, as a queued one would (its
    // output is written; the buffers stay alive until then), on the group's worker under the
    // op's deadline. (A group that ended has already finished it.)
    if (auto group = op_.group.lock()) {
      group->executor().enqueue([g = group.get(), ctx = std::shared_ptr<OpContext>(std::move(ctx_)),
                                 gathered = std::shared_ptr<char[]>(std::move(gathered_)),
                                 keep = std::move(keep_), in = in_, out = out_, count = count_,
                                 spec = spec_]() {
        try {
          ctx->wait_all();
          finish_direct_all_reduce(ctx->rank(), ctx->size(), in, out, gathered.get(), count,
                                   spec);
        } catch (...) {
          const std::exception_ptr error = std::current_exception();
          g->poison(error, error_message(error));
        }
      });
    }
  }

  std::string description() const override { return op_.format(); }

  void wait_timed_out(const std::string& why) override {
    if (auto group = op_.group.lock()) poison_after_wait_timeout(*group, why);
    // Then as a queued op does in a poisoned group: give up on the exchange (its wait sees the
    // poison within one slice) and tell the peers, so that they fail at once rather than at
    // their deadline.
    std::lock_guard<std::timed_mutex> drive(drive_mu_);
    if (ctx_) drive_to_the_end();
  }

  bool is_completed() const override {
    if (WorkState::is_completed()) return true;
    std::unique_lock<std::timed_mutex> drive(drive_mu_, std::try_to_lock);
    if (!drive.owns_lock() || !ctx_) return WorkState::is_completed();
    const_cast<DirectAllReduceWork*>(this)->poll();
    return WorkState::is_completed();
  }

  bool wait_until(Clock::time_point deadline, bool may_help) override {
    std::unique_lock<std::timed_mutex> drive(drive_mu_, std::defer_lock);
    while (!drive.try_lock_for(kDriveSlice)) {
      if (WorkState::is_completed()) return true;
      if (Clock::now() >= deadline) return false;
    }
    if (!ctx_) return WorkState::wait_until(deadline, may_help);  // finished already
    if (deadline < deadline_) {
      // A caller's own shorter timeout (Work::wait(ms)): poll; on expiry Work poisons the group
      // and the op stays in flight for a later wait (or the group's end) to finish.
      while (!poll()) {
        if (Clock::now() >= deadline) return false;
        std::this_thread::yield();
      }
      return true;
    }
    drive_to_the_end();
    return true;
  }

  void finish_before_group_ends(GroupImpl&) override {
    std::lock_guard<std::timed_mutex> drive(drive_mu_);
    if (ctx_) drive_to_the_end();
  }

 private:
  static constexpr auto kDriveSlice = std::chrono::milliseconds(1);

  // One non-blocking look; true once the op finished (either way). Called with drive_mu_ held.
  bool poll() {
    try {
      if (!ctx_->test_all()) return false;
      finish();
    } catch (...) {
      fail_op(std::current_exception());
    }
    return true;
  }

  // Waits under the op's deadline, with the diagnosis of absent ranks on expiry, as a queued
  // op does. Called with drive_mu_ held.
  void drive_to_the_end() {
    try {
      ctx_->wait_all();
      finish();
    } catch (...) {
      fail_op(std::current_exception());
    }
  }

  void finish() {
    finish_direct_all_reduce(ctx_->rank(), ctx_->size(), in_, out_, gathered_.get(), count_,
                             spec_);
    FERRY_LOG(Trace, "coll", description(), " done");
    release();
    complete();
  }

  // As a queued op fails: poison the group and, unless every rank times out by itself, tell the
  // peers that this rank gave up, so that they fail at once instead of at their deadline.
  void fail_op(std::exception_ptr error) {
    bool tell_peers = true;
    try {
      std::rethrow_exception(error);
    } catch (const OwnDeadlineExpired&) {
      tell_peers = false;
      error = public_error(error);  // the public type for the caller
    } catch (...) {
    }
    if (auto group = op_.group.lock()) {
      const std::string why = error_message(error);
      group->poison(error, why);
      if (tell_peers) group->transport().abandon_group(group->id(), why);
    }
    release();
    fail(error);
  }

  // The exchange is over (or withdrawn): the caller then holds the only handles to its tensors.
  void release() {
    ctx_.reset();
    gathered_.reset();
    keep_ = {};
  }

  OpDescription op_;  // formatted only when a message needs it
  Clock::time_point deadline_;
  mutable std::timed_mutex drive_mu_;  // held by the one thread testing or waiting
  std::unique_ptr<OpContext> ctx_;     // the posted exchange; null once finished
  std::unique_ptr<char[]> gathered_;   // every rank's payload
  const char* in_;
  char* out_;
  size_t count_;
  ReduceSpec spec_;
  KeptBuffers keep_;
};

}  // namespace

std::optional<Work> start_direct_all_reduce_now(const Group& group, const Tensor& input,
                                                Tensor& output, ReduceOp op) {
  GroupImpl& g = group.impl();
  // FERRY_CHECK=1: the fingerprint exchange runs on the worker's path (submit) only. On a
  // transport with its own collectives the direct exchange runs only when FERRY_ALGO asks for
  // it, a comparison rather than a fast path: it stays on the worker's general path there.
  if (g.native() != nullptr || check_mode() || op == ReduceOp::Avg ||
      accumulation_dtype(input.dtype()) != input.dtype())
    return std::nullopt;
  g.throw_if_poisoned("all_reduce");
  std::unique_lock<std::mutex> issuing(g.issue_mutex());
  if (!g.executor().idle()) return std::nullopt;  // ops queued before this one run first
  const uint64_t seq = g.take_sequence_number();
  const Clock::time_point deadline = Clock::now() + default_timeout();
  const size_t count = static_cast<size_t>(input.numel());
  const ReduceSpec spec{input.dtype(), op};
  const size_t bytes = count * spec.elem_bytes();
  auto ctx = std::make_unique<OpContext>(g, "all_reduce", seq, deadline);
  ctx->uses_no_scratch();
  ctx->set_fingerprint(Fingerprint::of("all_reduce", seq, g.id(), OpSummary::of(input, op)));
  std::unique_ptr<char[]> gathered(new char[bytes * static_cast<size_t>(g.size())]);
  const char* in = static_cast<const char*>(input.raw_data());
  char* out = static_cast<char*>(output.raw_data());
  output.bump_version();
  g.count_run(Collective::AllReduce, Algorithm::Direct);
  try {
    post_direct_all_reduce(*ctx, in, gathered.get(), bytes);
  } catch (...) {
    // The transport refused a request: withdraw what was posted and fail as a queued op does.
    const std::exception_ptr error = std::current_exception();
    ctx.reset();
    issuing.unlock();
    const std::string why = error_message(error);
    g.poison(error, why);
    g.transport().abandon_group(g.id(), why);
    auto failed = std::make_shared<WorkState>(
        describe_op("all_reduce", seq, OpSummary::of(input, op), group));
    failed->fail(error);
    return Work(failed);
  }
  issuing.unlock();
  auto state = std::make_shared<DirectAllReduceWork>(
      OpDescription("all_reduce", seq, OpSummary::of(input, op), group), deadline,
      std::move(ctx), std::move(gathered), in, out, count, spec,
      KeptBuffers{input.keep_alive(), output.keep_alive()});
  state->self_timed = true;
  g.track_in_flight(state);
  FERRY_LOG(Trace, "coll", state->description(), " started at issue");
  return Work(state);
}

}  // namespace ferry::detail
