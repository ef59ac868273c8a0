#include <ferry/collectives/engine/issue.h>

#include <ferry/collectives/engine/fingerprint.h>
#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/engine/queued_work.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>
#include <ferry/runtime/object_pool.h>

#include <mutex>

namespace ferry::detail {
namespace {

// A native collective's request: the transport moves it only inside its own calls (MPI).
class NativeInFlight final : public InFlight, public Pooled {
 public:
  explicit NativeInFlight(std::unique_ptr<NativeRequest> request) : request_(std::move(request)) {}

  bool test() override { return request_->test(); }
  bool poll_until(Clock::time_point deadline) override { return request_->wait_until(deadline); }
  void wait_to_the_end(GroupImpl& group, const char* op, uint64_t seq,
                       Clock::time_point deadline) override {
    OpContext ctx(group, op, seq, deadline);
    ctx.uses_no_scratch();
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
  std::unique_ptr<NativeRequest> request_;
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
  return Work(state);
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
                 std::make_unique<NativeInFlight>(std::move(request)));
}

Work post_now(GroupImpl& g, const Group& group, const Op& op,
              std::unique_lock<std::mutex>& issuing) {
  const uint64_t seq = g.take_sequence_number();
  const Clock::time_point deadline = Clock::now() + default_timeout();
  auto ctx = std::make_unique<OpContext>(g, op.name, seq, deadline);
  ctx->uses_no_scratch();
  ctx->set_fingerprint(Fingerprint::of(op.name, seq, g.id(), op.what));
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
Work queue(GroupImpl& g, const Group& group, const Op& op, bool checked) {
  const char* name = op.name;
  const uint64_t seq = g.take_sequence_number();
  const Fingerprint fingerprint = Fingerprint::of(name, seq, g.id(), op.what);
  std::shared_ptr<WorkState> state = std::allocate_shared<QueuedWork>(
      PoolAllocator<QueuedWork>(), OpDescription(name, seq, op.what, group));
  OpBody body = op.body();
  GroupImpl* gp = &g;
  g.executor().enqueue([gp, state_in = state, op = name, seq, fingerprint, checked,
                        body_in = std::move(body)]() mutable {
    // The task lets go of everything it holds (the body's tensor handles, its context) before
    // the op completes: a waiter that sees the op finished then holds the only handles to its
    // tensors. Autograd relies on that to keep a gradient a collective wrote as grad() instead
    // of copying it.
    std::shared_ptr<WorkState> state = std::move(state_in);
    OpBody body = std::move(body_in);
    std::exception_ptr error;
    bool tell_peers = true;
    bool kept = false;  // a receive could not be withdrawn (OpContext::buffers_kept)
    try {
      gp->throw_if_poisoned(op);
      FERRY_LOG(Trace, "coll", state->description(), " starts");
      std::vector<Tensor> outputs;
      {
        OpContext ctx(*gp, op, seq, Clock::now() + default_timeout());
        // Runs before the context goes, whether the body returned or threw.
        struct NoteKept {
          OpContext& ctx;
          bool& kept;
          ~NoteKept() {
            ctx.withdraw();
            kept = ctx.buffers_kept();
          }
        } note{ctx, kept};
        if (checked) exchange_fingerprints(ctx, fingerprint);
        ctx.set_fingerprint(fingerprint);
        outputs = body(ctx);
      }
      body = nullptr;
      FERRY_LOG(Trace, "coll", state->description(), " done");
      state->complete(std::move(outputs));
      return;
    } catch (const OwnDeadlineExpired&) {
      // Every rank stuck in this op times out by itself and names the absent ones: telling the
      // others now would race their own diagnosis. The caller sees the public type (an uncaught
      // one is named by std::terminate).
      error = public_error(std::current_exception());
      tell_peers = false;
    } catch (...) {
      // Anything else (a dead or mismatched peer, a poisoned group, a user who gave up): the
      // peers waiting on this rank would wait until their deadline, so give up on the group.
      error = std::current_exception();
    }
    // The transport may still write into the body's tensors: they live as long as the process.
    if (kept) keep_until_exit(std::make_shared<OpBody>(std::move(body)));
    const std::string why = error_message(error);
    gp->poison(error, why);
    if (tell_peers) gp->transport().abandon_group(gp->id(), why);
    state->fail(error);
  });
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
    if (g.native() != nullptr) {
      if (op.native_start) return start_native(g, group, op, issuing);
    } else if (op.post) {
      return post_now(g, group, op, issuing);
    }
  }
  return queue(g, group, op, checked);
}

}  // namespace ferry::detail
