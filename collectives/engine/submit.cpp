#include <ferry/collectives/engine/submit.h>

#include <ferry/collectives/engine/fingerprint.h>
#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/engine/queued_work.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

namespace ferry::detail {

Work submit(const Group& group, const char* op, OpSummary what, OpBody body) {
  GroupImpl& g = group.impl();
  g.throw_if_poisoned(op);
  // The sequence number and the queue position are taken together: two threads issuing on one
  // group at once must not queue seq 6 ahead of seq 5.
  std::lock_guard<std::mutex> issuing(g.issue_mutex());
  const uint64_t seq = g.take_sequence_number();
  const Fingerprint fingerprint = Fingerprint::of(op, seq, g.id(), what);
  const bool checked = check_mode();
  std::shared_ptr<WorkState> state =
      std::make_shared<QueuedWork>(OpDescription(op, seq, std::move(what), group));
  state->self_timed = true;
  GroupImpl* gp = &g;
  g.executor().enqueue([gp, state_in = state, op, seq, fingerprint, checked,
                        body_in = std::move(body)]() mutable {
    // The task lets go of everything it holds (the body's tensor handles, its context) before
    // the op completes: a waiter that sees the op finished then holds the only handles to its
    // tensors. Autograd relies on that to keep a gradient a collective wrote as grad() instead
    // of copying it.
    std::shared_ptr<WorkState> state = std::move(state_in);
    OpBody body = std::move(body_in);
    std::exception_ptr error;
    bool tell_peers = true;
    try {
      gp->throw_if_poisoned(op);
      FERRY_LOG(Trace, "coll", state->description(), " starts");
      std::vector<Tensor> outputs;
      {
        OpContext ctx(*gp, op, seq, Clock::now() + default_timeout());
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
    const std::string why = error_message(error);
    gp->poison(error, why);
    if (tell_peers) gp->transport().abandon_group(gp->id(), why);
    state->fail(error);
  });
  return Work(state);
}

}  // namespace ferry::detail
