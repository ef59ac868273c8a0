// UcxComm's ends: withdrawing an op (cancel) and closing the endpoints and the worker. Both must
// hold when a peer is alive but silent (stopped, or stuck outside ferry): nothing UCX does
// afterwards may touch a buffer its caller got back, and the worker's end must not abort on
// requests UCX still holds.
#include <ferry/backends/ucx/ucx_comm.h>

#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace ferry::detail {
namespace {

// How long cancel() gives a receive whose data is already moving to finish by itself before it
// cuts the endpoint to the sender (cut_off_locked), which makes UCX let go of it at once. From a
// peer whose process is stopped nothing more comes: a short grace. From any other the transfer usually ends within a moment; a peer that is still
// sending after a second is stuck (its process hangs outside ferry), or so slow that the op
// would have failed anyway, and waiting longer would push the caller's error past its deadline.
constexpr auto kCancelStuckGrace = std::chrono::milliseconds(50);
constexpr auto kCancelRecvGrace = std::chrono::seconds(1);
// After the cut, UCX completes the receive with an error during the next progress; the bound
// should never be reached.
constexpr auto kCancelRecvWait = std::chrono::seconds(5);
// How much longer cancel() waits for a CMA read into the receive's buffer that runs on another
// thread (a queued one is run by the waiting thread itself). The read is a process_vm_readv of
// this host's memory: it needs nothing from the peer (a peer that ended makes it fail at once)
// and moves gigabytes per second, so it ends within a second even for huge messages. The op must
// not finish while it runs (the caller would free a buffer that is still written), so the bound
// is generous and reaching it aborts the process: only a reader thread that never runs again (a
// debugger holding it) gets there.
constexpr auto kCancelReadWait = std::chrono::seconds(60);
// Sends cannot be withdrawn from UCX; a short wait lets one that is nearly done finish.
constexpr auto kCancelSendWait = std::chrono::milliseconds(20);
// For the flush of the endpoints to healthy peers, and for the unexpected messages, at the end.
constexpr auto kCloseWait = std::chrono::seconds(2);

}  // namespace

UcxComm::~UcxComm() {
  {
    auto lock = worker_->lock();
    worker_->set_sleep_hook(nullptr);
    close_endpoints();
    discard_unexpected_locked();
    release_held_receives_locked();
  }
  // The worker goes while pending_ still holds what its callbacks may touch; worker_ is null
  // meanwhile, so finish() called from those callbacks does not touch it.
  std::unique_ptr<UcxWorker> worker = std::move(worker_);
  worker.reset();
}

bool UcxComm::held_with_locked(int rank, bool receives_only) const {
  for (const auto& [raw, op] : pending_) {
    if (op->peer != rank) continue;
    for (const UcxLeg& leg : op->legs)
      if (leg.held && (!receives_only || !leg.is_send)) return true;
  }
  return false;
}

void UcxComm::wait_closed_locked(void* r) {
  if (!UCS_PTR_IS_PTR(r)) return;  // closed at once (or failed: nothing left to wait for)
  const auto until = Clock::now() + kCloseWait;
  while (ucp_request_check_status(r) == UCS_INPROGRESS && Clock::now() < until)
    ucp_worker_progress(worker_->worker());
  if (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_request_cancel(worker_->worker(), r);
  ucp_request_free(r);
}

void UcxComm::close_endpoints() {
  // A flush lets sends that completed locally (buffered) still reach their peers, but it waits
  // for the peer: only an endpoint to a peer that is healthy and answered everything gets one.
  // Every other closes with force, which makes UCX drop what it still holds with that peer (its
  // sends, a receive whose data was moving): a dead peer, one that is stopped or left an op
  // unanswered, one with which UCX still holds a request (the worker's end asserts that no
  // request is left on an endpoint), and every peer after finalize's handshake (every message
  // was taken by then).
  std::vector<void*> closing;
  for (size_t p = 0; p < eps_.size(); ++p) {
    if (eps_[p] == nullptr) continue;
    const int rank = static_cast<int>(p);
    const bool gone = !dead_why_[p].empty() || (watch_.watched(rank) && watch_.ended(rank));
    const bool stopped = watch_.stopped(rank);
    const bool held = held_with_locked(rank, /*receives_only=*/false);
    const bool force = closing_ || side_ || gone || unanswered_[p] || stopped || held;
    if (force && !closing_ && !side_) {
      FERRY_LOG(Info, "ucx", "rank ", rank_, ": closing the endpoint to rank ", rank,
                " with force (", gone ? "it ended" : stopped ? "it is stopped"
                                   : unanswered_[p] ? "it left an op unanswered"
                                                    : "UCX still holds a request with it", ")");
    }
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    void* r = ucp_ep_close_nbx(eps_[p], &param);
    eps_[p] = nullptr;
    if (UCS_PTR_IS_PTR(r)) closing.push_back(r);
  }
  // One bound for all of them together.
  const auto until = Clock::now() + kCloseWait;
  for (void* r : closing) {
    while (ucp_request_check_status(r) == UCS_INPROGRESS && Clock::now() < until)
      ucp_worker_progress(worker_->worker());
    if (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_request_cancel(worker_->worker(), r);
    ucp_request_free(r);
  }
}

void UcxComm::discard_unexpected_locked() {
  std::vector<char> sink;
  const auto until = Clock::now() + kCloseWait;  // for all of them together
  for (int i = 0; i < 4096; ++i) {
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h msg =
        ucp_tag_probe_nb(worker_->worker(), 0, 0, /*remove=*/1, &info);  // mask 0: any tag
    if (msg == nullptr) return;
    sink.resize(std::max<size_t>(info.length, 1));
    ucp_request_param_t param{};
    void* r = ucp_tag_msg_recv_nbx(worker_->worker(), sink.data(), info.length, msg, &param);
    if (!UCS_PTR_IS_PTR(r)) continue;  // taken at once (eager), or failed: either way gone
    // A rendezvous message needs its sender, which may be gone: a bounded wait, then cancel.
    while (ucp_request_check_status(r) == UCS_INPROGRESS && Clock::now() < until)
      ucp_worker_progress(worker_->worker());
    if (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_request_cancel(worker_->worker(), r);
    ucp_request_free(r);
  }
}

void UcxComm::release_held_receives_locked() {
  std::vector<void*> held;
  for (const auto& [raw, op] : pending_)
    for (const UcxLeg& leg : op->legs)
      if (leg.held && !leg.is_send && leg.request != nullptr) held.push_back(leg.request);
  if (held.empty()) return;
  for (void* r : held) ucp_request_cancel(worker_->worker(), r);
  // A cancelled receive completes, through its callback (which frees it), on a later progress.
  auto any_held = [&] {
    for (const auto& [raw, op] : pending_)
      for (const UcxLeg& leg : op->legs)
        if (leg.held && !leg.is_send) return true;
    return false;
  };
  const auto until = Clock::now() + kCloseWait;
  while (any_held() && Clock::now() < until) ucp_worker_progress(worker_->worker());
}

void UcxComm::begin_closing() {
  auto lock = worker_->lock();
  closing_ = true;
}

void UcxComm::start_cancel(const std::shared_ptr<UcxOp>& op) {
  if (op->done.load(std::memory_order_acquire)) return;
  auto lock = worker_->lock();
  if (op->done.load(std::memory_order_relaxed) || op->withdrawn_at != Clock::time_point{}) return;
  op->withdrawn_at = Clock::now();
  const char* why = op->is_send ? "the sender withdrew it" : "the receiver withdrew it";
  op->forced = std::make_exception_ptr(TransportError(
      str("ferry: ucx transport on rank ", rank_, ": ", op_str(*op), " withdrawn: ", why)));
  op->peer_quiet = watch_.stopped(op->peer);
  unanswered_[op->peer] = true;
  // A receive is withdrawn from UCX; a CMA read under way is waited for in cancel. A CMA send
  // keeps waiting for its acknowledgement, which cleans it up if it ever comes.
  if (!op->is_send) {
    for (UcxLeg& leg : op->legs)
      if (leg.held && !leg.is_send && leg.request != nullptr)
        ucp_request_cancel(worker_->worker(), leg.request);
  }
}

void UcxComm::cancel(const std::shared_ptr<UcxOp>& op, Clock::time_point limit) {
  if (op->done.load(std::memory_order_acquire)) return;
  start_cancel(op);
  const int peer = op->peer;
  Clock::time_point grace_end;
  {
    auto lock = worker_->lock();
    if (op->done.load(std::memory_order_relaxed)) return;
    const auto grace = op->is_send       ? Clock::duration(kCancelSendWait)
                       : op->peer_quiet ? Clock::duration(kCancelStuckGrace)
                                        : Clock::duration(kCancelRecvGrace);
    // Never below the shortest grace, even when `limit` has passed: UCX may need a progress
    // call to confirm a withdrawal, and cutting off a live peer for want of one would fail
    // every later op with it.
    const auto floor = op->withdrawn_at + std::min(grace, Clock::duration(kCancelStuckGrace));
    grace_end = std::min(op->withdrawn_at + grace, std::max(limit, floor));
  }
  auto ucx_let_go = [&] { return op->done.load(std::memory_order_acquire); };
  if (worker_->wait_until(ucx_let_go, grace_end)) return;
  auto lock = worker_->lock();
  if (op->done.load(std::memory_order_relaxed)) return;
  if (!op->is_send && !op->cma.reading) {
    // UCX matched the receive and its data is moving, from a peer that does not finish it:
    // ucp_request_cancel cannot withdraw it, and UCX would write into the caller's buffer
    // whenever the peer resumed. Cutting the endpoint makes UCX let go of it now.
    cut_off_locked(peer, str("it did not finish sending its message for ", tag_str(op->tag),
                             " to rank ", rank_, ", which withdrew the receive (its deadline "
                             "expired or it gave up), so rank ", rank_,
                             " closed its endpoint to it"));
    lock.unlock();
    if (worker_->wait_until(ucx_let_go, Clock::now() + kCancelRecvWait)) return;
    lock.lock();
    if (op->done.load(std::memory_order_relaxed)) return;
  }
  // A CMA read under way writes into the caller's buffer: wait for it (it finishes the op, with
  // `forced`), never finish the op under it.
  const auto read_until = Clock::now() + kCancelReadWait;
  while (op->cma.reading) {
    if (Clock::now() >= read_until) {
      std::fprintf(stderr, "ferry: ucx transport on rank %d: the CMA read of the %s did not end "
                   "within %lld s after the receive was withdrawn; aborting rather than letting "
                   "its buffer be freed while it is written\n", rank_, op_str(*op).c_str(),
                   static_cast<long long>(kCancelReadWait.count()));
      std::abort();
    }
    lock.unlock();
    if (worker_->wait_until(ucx_let_go, std::min(read_until, Clock::now() + kCancelSendWait)))
      return;
    lock.lock();
    if (op->done.load(std::memory_order_relaxed)) return;
  }
  if (!op->is_send) {
    std::fprintf(stderr, "ferry: ucx transport on rank %d: %s could not be withdrawn even after "
                 "its endpoint was closed; its buffer may still be written, so it is kept for "
                 "the rest of the process\n", rank_, op_str(*op).c_str());
  }
  // A send UCX still holds stays registered, and its peer may still read the buffer (by CMA, or
  // UCX's rendezvous) if it ever posts the matching receive: freed and reused meanwhile, the
  // peer would be sent whatever the memory then holds. Its buffer is kept as a receive's is.
  op->not_let_go = true;
  finish(*op, op->forced);
}

}  // namespace ferry::detail
