#include <ferry/collectives/engine/issue.h>

#include <ferry/collectives/engine/fingerprint.h>
#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/engine/queued_work.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>
#include <ferry/runtime/object_pool.h>
#include <ferry/runtime/timeline.h>

#include <mutex>

namespace ferry::detail {
namespace {

// A native collective's request: the transport moves it only inside its own calls (MPI).
// It has no OpContext unless a wait runs it to the end, so it puts its own event on
// FERRY_TIMELINE once it is seen finished (a context records the rest of the ops').
class NativeInFlight final : public InFlight, public Pooled {
 public:
  NativeInFlight(std::unique_ptr<NativeRequest> request, GroupImpl& group, const char* op,
                 uint64_t seq)
      : request_(std::move(request)), group_(group), op_(op), seq_(seq) {
    if (timeline_on()) wall_start_ = std::chrono::system_clock::now();
  }

  bool test() override { return seen(request_->test()); }
  bool poll_until(Clock::time_point deadline) override {
    return seen(request_->wait_until(deadline));
  }
  void wait_to_the_end(GroupImpl& group, const char* op, uint64_t seq,
                       Clock::time_point deadline) override {
    OpContext ctx(group, op, seq, deadline);
    ctx.uses_no_scratch();
    if (timeline_on()) {  // the context's event, from the start at issue
      ctx.started_on_the_wall_at(wall_start_);
      recorded_ = true;
    }
    ctx.wait_native(std::move(request_), {});  // throws on timeout, poisoned, failure
  }
  std::vector<Tensor> finish() override {
    // After wait_to_the_end the request is gone: wait_native has rethrown its failure.
    if (request_) request_->rethrow_if_failed();
    return {};
  }
  OnFailure on_failure() const override { return OnFailure::kPoisonKeepBuffers; }
  bool polls_first() const override { return true; }

 private:
  bool seen(bool finished) {
    if (finished && !recorded_ && timeline_on()) {
      recorded_ = true;
      bool failed = false;
      try {
        request_->rethrow_if_failed();
      } catch (...) {
        failed = true;
      }
      const int rank = group_.rank();
      timeline_event(op_, group_.members()[static_cast<size_t>(rank)], group_.id(), wall_start_,
                     std::chrono::system_clock::now(),
                     str("\"seq\": ", seq_, ", \"group_rank\": ", rank, ", \"group_size\": ",
                         group_.size(), failed ? ", \"failed\": true" : ""));
    }
    return finished;
  }

  std::unique_ptr<NativeRequest> request_;
  GroupImpl& group_;
  const char* op_;
  uint64_t seq_;
  std::chrono::system_clock::time_point wall_start_{};  // for FERRY_TIMELINE
  bool recorded_ = false;
};

KeptBuffers kept_buffers(const Op& op) {
  KeptBuffers kept;
  for (size_t k = 0; k < kept.size(); ++k)
    if (op.keep[k] != nullptr) kept[k] = op.keep[k]->keep_alive();
  return kept;
}

// An op that failed before anything of it was in flight.
Work failed_at_issue(const Group& group, const Op& op, uint64_t seq, std::exception_ptr error) {
  auto state = std::make_shared<WorkState>(describe_op(op.name, seq, op.what, group));
  state->fail(std::move(error));
  return Work(state);
}

Work started(GroupImpl& g, const Group& group, const Op& op, uint64_t seq,
             Clock::time_point deadline, std::unique_ptr<InFlight> pending) {
  // The Work's state and its control block in one pooled block (object_pool.h): an op started
  // at issue then allocates nothing in the steady state.
  auto state = std::allocate_shared<InFlightWork>(
      PoolAllocator<InFlightWork>(), OpDescription(op.name, seq, op.what, group), deadline,
      std::move(pending), kept_buffers(op));
  g.track_in_flight(state);
  FERRY_LOG(Trace, "coll", state->description(), " started at issue");
  return Work(std::move(state));
}

Work start_native(GroupImpl& g, const Group& group, const Op& op,
                  std::unique_lock<std::mutex>& issuing) {
  std::unique_ptr<NativeRequest> request;
  std::exception_ptr start_error;
  try {
    request = op.native_start(*g.native());
  } catch (const InvalidArgument&) {
    throw;  // refused before anything started (a block too large for MPI's int counts)
  } catch (...) {
    start_error = std::current_exception();
  }
  const Clock::time_point deadline = Clock::now() + default_timeout();
  const uint64_t seq = g.take_sequence_number();
  issuing.unlock();
  if (start_error) {
    g.poison(start_error, error_message(start_error));
    return failed_at_issue(group, op, seq, start_error);
  }
  return started(g, group, op, seq, deadline,
                 std::make_unique<NativeInFlight>(std::move(request), g, op.name, seq));
}

Work post_now(GroupImpl& g, const Group& group, const Op& op,
              std::unique_lock<std::mutex>& issuing) {
  const uint64_t seq = g.take_sequence_number();
  const Clock::time_point now = Clock::now();
  const Clock::time_point deadline = now + default_timeout();
  auto ctx = std::make_unique<OpContext>(
      g, op.name, Fingerprint::of(op.name, seq, g.id(), op.what), now, deadline);
  ctx->uses_no_scratch();
  std::unique_ptr<InFlight> pending;
  try {
    pending = op.post(std::move(ctx));
  } catch (...) {
    // The transport refused a request: what was posted is withdrawn with the context; fail as
    // a queued op does.
    const std::exception_ptr error = std::current_exception();
    issuing.unlock();
    const std::string why = error_message(error);
    g.poison(error, why);
    g.transport().abandon_group(g.id(), why);
    return failed_at_issue(group, op, seq, error);
  }
  issuing.unlock();
  return started(g, group, op, seq, deadline, std::move(pending));
}

// Called with the issue lock held: the sequence number and the queue position are taken
// together, so that two threads issuing on one group at once do not queue seq 6 ahead of seq 5.
// A group of one rank runs a small op at once on this thread when its worker is idle: the op
// waits for no peer, and handing it to the worker costs two thread wake-ups, more than copying
// kInlineBytes (about a twentieth of a one-rank DLRM step at batch 128, spent on the agreement's
// all_gather and the gradients' all_reduce). A larger op still goes to the worker, which copies
// it on another core while this thread goes on. The issue lock is held meanwhile, which keeps
// the order; nothing can be waiting on the op's Work yet, so no completion hook runs under it.
constexpr int64_t kInlineBytes = 64 << 10;

bool runs_inline(const Group& group, const Op& op, bool checked) {
  if (group.size() != 1 || checked || !op.what.has_tensor || op.what.lists) return false;
  int64_t elements = 1;
  for (int d = 0; d < op.what.ndim && d < OpSummary::kDims; ++d) elements *= op.what.dims[d];
  return op.what.ndim <= OpSummary::kDims &&
         elements * static_cast<int64_t>(dtype_size(op.what.dtype)) <= kInlineBytes;
}

Work queue(GroupImpl& g, const Group& group, const Op& op, bool checked) {
  const uint64_t seq = g.take_sequence_number();
  auto state = std::allocate_shared<QueuedWork>(
      PoolAllocator<QueuedWork>(), OpDescription(op.name, seq, op.what, group), g,
      Fingerprint::of(op.name, seq, g.id(), op.what), checked, op.body());
  if (runs_inline(group, op, checked) && QueuedWork::run_here_if_idle(state)) return Work(state);
  QueuedWork::enqueue(state);
  return Work(state);
}

}  // namespace

Work issue(const Group& group, const Op& op) {
  GroupImpl& g = group.impl();
  g.throw_if_poisoned(op.name);
  const bool checked = check_mode();
  std::unique_lock<std::mutex> issuing(g.issue_mutex());
  // Ops queued before this one must start first: then this one is queued behind them.
  if (!checked && g.executor().idle()) {
    // An op carries a post only when the table chose a path that posts (the direct exchange,
    // the pairwise all-to-all, shared memory): that path then starts here on any transport.
    if (op.post) return post_now(g, group, op, issuing);
    if (g.native() != nullptr && op.native_start) return start_native(g, group, op, issuing);
  }
  return queue(g, group, op, checked);
}

}  // namespace ferry::detail
