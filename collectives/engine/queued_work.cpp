#include <ferry/collectives/engine/queued_work.h>

#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/engine/op_context.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

namespace ferry::detail {

void poison_after_wait_timeout(GroupImpl& group, const std::string& why) {
  group.poison(std::make_exception_ptr(TimeoutError("ferry: " + why)), why);
}

void QueuedWork::enqueue(const std::shared_ptr<QueuedWork>& work) {
  QueuedWork* task = work.get();
  task->queued_ = work;
  // The task is a plain pointer: std::function keeps it inline, where a captured shared_ptr
  // would cost an allocation per op.
  task->group_->executor().enqueue([task] { task->run(); });
}

bool QueuedWork::run_here_if_idle(const std::shared_ptr<QueuedWork>& work) {
  QueuedWork* task = work.get();
  task->queued_ = work;
  if (task->group_->executor().run_here_if_idle([task] { task->run(); })) return true;
  task->queued_.reset();
  return false;
}

void QueuedWork::run() {
  // The task lets go of everything it holds (the body's tensor handles, its context) before
  // the op completes: a waiter that sees the op finished then holds the only handles to its
  // tensors. Autograd relies on that to keep a gradient a collective wrote as grad() instead of
  // copying it.
  const std::shared_ptr<QueuedWork> self = std::move(queued_);
  GroupImpl* const g = group_;
  const char* const op = op_.op;
  std::exception_ptr error;
  bool tell_peers = true;
  bool kept = false;  // a receive could not be withdrawn (OpContext::buffers_kept)
  try {
    g->throw_if_poisoned(op);
    FERRY_LOG(Trace, "coll", description(), " starts");
    std::vector<Tensor> outputs;
    {
      OpContext ctx(*g, op, op_.seq, Clock::now() + default_timeout());
      // Runs before the context goes, whether the body returned or threw.
      struct NoteKept {
        OpContext& ctx;
        bool& kept;
        ~NoteKept() {
          ctx.withdraw();
          kept = ctx.buffers_kept();
        }
      } note{ctx, kept};
      if (checked_) exchange_fingerprints(ctx, fingerprint_);
      ctx.set_fingerprint(fingerprint_);
      outputs = body_(ctx);
    }
    body_.reset();
    FERRY_LOG(Trace, "coll", description(), " done");
    complete(std::move(outputs));
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
  if (kept) {
    keep_until_exit(std::make_shared<OpBody>(std::move(body_)));
  } else {
    body_.reset();
  }
  const std::string why = error_message(error);
  g->poison(error, why);
  if (tell_peers) g->transport().abandon_group(g->id(), why);
  fail(error);
}

bool QueuedWork::progress(Mover who, std::chrono::milliseconds timeout,
                          const std::shared_ptr<WorkState>&) {
  switch (who) {
    case Mover::kTester: return is_completed();
    case Mover::kNobody: return true;
    case Mover::kWaiter:
    case Mover::kHelper: break;
  }
  const Clock::time_point deadline = deadline_after(timeout);
  if (who == Mover::kHelper) {
    while (!is_completed()) {
      auto g = op_.group.lock();  // weak: a Work may outlive its group (and its worker)
      if (!g || !g->executor().run_one_here()) break;
    }
  }
  if (await(deadline)) return true;
  if (auto g = op_.group.lock()) poison_after_wait_timeout(*g, expired_wait(timeout));
  return false;
}

}  // namespace ferry::detail
