#include <ferry/backends/ucx/ucx_comm.h>

#include <ferry/backends/ucx/ucx_abandon_message.h>
#include <ferry/backends/ucx/ucx_settings.h>
#include <ferry/backends/ucx/ucx_tag.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <poll.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

namespace ferry::detail {
namespace {

constexpr auto kAbandonWait = std::chrono::milliseconds(200);

bool is_peer_status(ucs_status_t s) {
  return s == UCS_ERR_CONNECTION_RESET || s == UCS_ERR_ENDPOINT_TIMEOUT ||
         s == UCS_ERR_UNREACHABLE || s == UCS_ERR_REJECTED || s == UCS_ERR_NOT_CONNECTED ||
         s == UCS_ERR_IO_ERROR;
}

std::vector<bool> locals_of(const std::vector<UcxPeerInfo>& peers) {
  std::vector<bool> v;
  for (const UcxPeerInfo& p : peers) v.push_back(p.local);
  return v;
}

std::vector<ProcessId> processes_of(const std::vector<UcxPeerInfo>& peers) {
  std::vector<ProcessId> v;
  for (const UcxPeerInfo& p : peers) v.push_back(p.process);
  return v;
}

}  // namespace

std::string op_str(const UcxOp& op) {
  return str(op.is_send ? "send to rank " : "receive from rank ", op.peer, " for ",
             tag_str(op.tag));
}

UcxComm::UcxComm(std::unique_ptr<UcxWorker> worker, int rank, const std::vector<UcxPeerInfo>& peers,
                 UcxChannel channel)
    : worker_(std::move(worker)),
      rank_(rank),
      side_(channel == UcxChannel::Side),
      dead_why_(peers.size()),
      receives_wait_until_(peers.size()),
      unanswered_(peers.size(), false),
      cut_(peers.size(), false),
      watch_(rank, locals_of(peers), processes_of(peers)),
      cma_min_bytes_(side_ ? SIZE_MAX : ucx_cma_min_bytes()),
      cma_to_(peers.size(), false),
      cma_from_(peers.size(), false),
      cma_cookie_(peers.size(), 0) {
  const int n = static_cast<int>(peers.size());
  FERRY_CHECK(n <= kUcxMaxRanks, InvalidArgument, "ucx transport: at most ", kUcxMaxRanks,
              " ranks fit its tags, given a world of ", n);
  for (const UcxPeerInfo& p : peers) local_ranks_ += p.local ? 1 : 0;
  worker_->set_oversubscribed(local_ranks_ > static_cast<int>(std::thread::hardware_concurrency()));
  peer_args_.resize(peers.size());
  eps_.assign(peers.size(), nullptr);
  const bool cma = cma_min_bytes_ != SIZE_MAX;
  for (int p = 0; p < n; ++p) {
    // Reading needs the peer's process verified: its pid names that very process (the pidfd
    // watch), and that process holds the peer's token (not an unrelated process with the same
    // pid in another pid namespace). Sending a descriptor needs only that the peer is on this
    // host (it answers Fallback if it cannot read).
    cma_to_[p] = cma && p != rank && peers[p].local;
    if (!cma || p == rank || !watch_.watched(p)) continue;
    std::string why;
    if (!cma_token_matches(watch_.pid(p), peers[p].token, why)) {
      FERRY_LOG(Info, "ucx", "rank ", rank, " does not read the memory of rank ", p, " (", why,
                "): its large messages come through UCX");
    } else if (watch_.ended(p)) {
      FERRY_LOG(Info, "ucx", "rank ", rank, ": rank ", p, " ended during the CMA check");
    } else {
      cma_from_[p] = true;
    }
  }
  auto lock = worker_->lock();
  ucs_status_t status = UCS_OK;
  if (!side_) {
    ucp_am_handler_param_t am{};
    am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    am.id = kUcxAbandonAmId;
    am.cb = &UcxComm::on_abandon;
    am.arg = this;
    status = ucp_worker_set_am_recv_handler(worker_->worker(), &am);
    FERRY_CHECK(status == UCS_OK, TransportError, "ucx transport on rank ", rank,
                ": ucp_worker_set_am_recv_handler failed: ", ucx_status_str(status));
  }
  const bool peer_errors = ucx_peer_error_handling();
  for (int p = 0; p < n; ++p) {
    peer_args_[p] = PeerArg{this, p};
    if (side_ && p != rank && !peers[p].local) {
      // The side channel serves this host's ranks only (ucx_transport.cpp's SideChannel says
      // why): made when a diagnosis first needs it, an endpoint to another host would connect
      // then, and UCX 1.13 connects a TCP endpoint blocking, for as long as the kernel retries
      // a host that no longer answers (a cut link: over a minute here, the deadline long past).
      eps_[p] = nullptr;
      cut_[p] = true;
      dead_why_[p] = "the side channel reaches only the ranks of this host";
      continue;
    }
    const std::string& address = side_ ? peers[p].side_address : peers[p].address;
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(address.data());
    params.err_mode = peer_errors ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    params.err_handler.cb = &UcxComm::on_ep_error;
    params.err_handler.arg = &peer_args_[p];
    status = ucp_ep_create(worker_->worker(), &params, &eps_[p]);
    if (status != UCS_OK && side_) {
      // The side channel is made when a diagnosis first needs it, when a peer may be gone.
      eps_[p] = nullptr;
      cut_[p] = true;
      dead_why_[p] = str("its side channel endpoint could not be created: ",
                         ucx_status_str(status));
      continue;
    }
    if (status != UCS_OK) {
      close_endpoints();
      FERRY_THROW(TransportError, "ucx transport on rank ", rank,
                  ": cannot create the endpoint to rank ", p, ": ", ucx_status_str(status));
    }
  }
  worker_->set_sleep_hook(this);
  if (side_) return;
  if (log_enabled(LogLevel::Trace, "ucx") && n > 1) {
    // UCX's own description of the lanes and protocols to the next rank (FERRY_DEBUG=trace).
    char* text = nullptr;
    size_t length = 0;
    if (FILE* f = open_memstream(&text, &length)) {
      ucp_ep_print_info(eps_[(rank + 1) % n], f);
      std::fclose(f);
      log_line(LogLevel::Trace, "ucx", str("rank ", rank, " endpoint to rank ", (rank + 1) % n,
                                            ":\n", std::string(text, length)));
      std::free(text);
    }
  }
  FERRY_LOG(Info, "ucx", "rank ", rank, ": watching the processes of ", watch_.watched(),
            " local peers");
}

void UcxComm::post(const std::shared_ptr<UcxOp>& op, void* data) {
  FERRY_CHECK(op->peer >= 0 && op->peer < size(), InvalidArgument, "ucx transport ",
              op->is_send ? "isend" : "irecv", " on rank ", rank_, ": peer must be in [0, ",
              size(), "), given ", op->peer);
  // Throws before anything is posted when the tag does not fit.
  const uint64_t tag = pack_ucx_tag(op->is_send ? rank_ : op->peer, op->tag);
  op->comm = this;
  op->data = data;
  auto lock = worker_->lock();
  if (std::exception_ptr failure = failure_for(op->peer, op->tag.group)) {
    // A receive still gets what a peer delivered before it ended or gave up (a peer that timed
    // out sent its part of the timeout diagnosis first: its peers must not call it silent);
    // nothing else goes to it, and nothing at all once its endpoint was cut.
    // A receive from a peer whose end was seen a moment ago waits with the others from it
    // (peer_failed says why).
    const bool waiting_out = receives_wait_until_[op->peer] != Clock::time_point{};
    if (op->is_send || cut_[op->peer] || (!delivered(tag) && !waiting_out)) {
      finish(*op, failure);
      return;
    }
  }
  if (op->is_send && op->bytes >= cma_min_bytes_ && cma_to_[op->peer]) {
    post_cma_send(op, tag);
  } else if (op->is_send) {
    post_leg(op, LegKind::Data, true, data, op->bytes, tag);
  } else if (op->bytes < kCmaDescriptorBytes) {
    // A receive takes the data or a CMA descriptor for it (the descriptor bit is masked out);
    // one smaller than a descriptor takes either into the op's own buffer (UcxOp::bounced).
    op->cma.bounced = true;
    post_leg(op, LegKind::Data, false, op->cma.desc_wire, kCmaDescriptorBytes, tag, kUcxRecvMask);
  } else {
    post_leg(op, LegKind::Data, false, data, op->bytes, tag, kUcxRecvMask);
  }
}

void UcxComm::post_leg(const std::shared_ptr<UcxOp>& op, LegKind kind, bool is_send,
                       void* buffer, size_t length, uint64_t tag, uint64_t mask) {
  UcxLeg* leg = !op->legs[0].held ? &op->legs[0] : &op->legs[1];
  FERRY_CHECK(!leg->held, TransportError, "ucx transport on rank ", rank_, ": ", op_str(*op),
              " has no free leg (internal error)");
  *leg = UcxLeg{op.get(), kind, is_send, true, nullptr};
  // Registered first: the callback finds it even if UCX completes the leg very early.
  pending_.try_emplace(op.get(), op);  // try_: no node made when the op's other leg is there
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.user_data = leg;
  void* r;
  if (is_send) {
    param.cb.send = &UcxComm::on_send_done;
    r = ucp_tag_send_nbx(eps_[op->peer], buffer, length, tag, &param);
  } else {
    // Always through the callback: UCX 1.13 may complete a receive at once without filling
    // the receive info it was given, and the length is what the exact-size check needs.
    param.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv = &UcxComm::on_recv_done;
    r = ucp_tag_recv_nbx(worker_->worker(), buffer, length, tag, mask, &param);
  }
  if (r == nullptr) {
    leg_done(leg, UCS_OK, length, tag);  // sends only: receives never complete at once
  } else if (UCS_PTR_IS_ERR(r)) {
    leg_done(leg, UCS_PTR_STATUS(r), 0, tag);
  } else if (leg->held) {
    leg->request = r;
  }
}

void UcxComm::leg_done(UcxLeg* leg, ucs_status_t status, size_t length, uint64_t sender_tag) {
  auto it = pending_.find(leg->op);
  if (it == pending_.end()) return;  // cannot happen: every op UCX holds is registered
  std::shared_ptr<UcxOp> op = it->second;
  leg->held = false;
  leg->request = nullptr;
  switch (leg->kind) {
    case LegKind::Data:
      if (!op->is_send && status == UCS_OK && (sender_tag & kUcxCmaDescriptorBit) != 0) {
        on_descriptor(op, length);
      } else {
        if (op->cma.bounced && status == UCS_OK && length == op->bytes && length > 0 &&
            !op->done.load(std::memory_order_relaxed))
          std::memcpy(op->data, op->cma.desc_wire, length);
        settle(*op, error_for(*op, status, length));
      }
      break;
    case LegKind::Payload:
      if (!op->is_send && status == UCS_OK && length == 0 && op->bytes != 0) {
        // A sender that withdrew its send (its deadline expired) before the Fallback came.
        settle(*op, std::make_exception_ptr(PeerFailure(str(
            "ferry: rank ", op->peer, " withdrew its message for ", tag_str(op->tag),
            " before sending the data (its deadline expired or it gave up; seen from rank ",
            rank_, ")"))));
      } else {
        settle(*op, error_for(*op, status, length));
      }
      break;
    case LegKind::Descriptor:
      if (status != UCS_OK) {
        settle(*op, error_for(*op, status, 0));
        // Nobody will answer a descriptor that did not leave.
        for (UcxLeg& l : op->legs)
          if (l.held && l.kind == LegKind::AckRecv && l.request != nullptr)
            ucp_request_cancel(worker_->worker(), l.request);
      }
      break;
    case LegKind::AckRecv:
      on_ack(op, status, length);
      break;
    case LegKind::AckSend:
      break;  // best effort: a sender we cannot tell fails when it learns that we gave up
  }
  retire_if_idle(op.get());
}

void UcxComm::settle(UcxOp& op, std::exception_ptr error) {
  if (op.done.load(std::memory_order_relaxed)) return;  // failed earlier (peer died, ...)
  finish(op, op.forced ? op.forced : std::move(error));
}

void UcxComm::retire_if_idle(UcxOp* op) {
  if (op->legs[0].held || op->legs[1].held || op->cma.reading) return;
  pending_.erase(op);
}

std::exception_ptr UcxComm::error_for(const UcxOp& op, ucs_status_t status, size_t length) const {
  if (status == UCS_OK && (op.is_send || length == op.bytes)) return nullptr;
  if (status == UCS_OK || status == UCS_ERR_MESSAGE_TRUNCATED) {
    const std::string sent = status == UCS_OK ? str(length, " bytes") : "more bytes";
    return std::make_exception_ptr(MismatchError(str(
        "ferry: rank ", op.peer, " sent ", sent, " to rank ", rank_, " for ", tag_str(op.tag),
        " but rank ", rank_, " expected ", op.bytes,
        " bytes: the ranks called the collective with different sizes")));
  }
  if (!dead_why_[op.peer].empty()) return peer_failure(op.peer);
  if (is_peer_status(status)) {
    return std::make_exception_ptr(PeerFailure(str("ferry: ucx transport on rank ", rank_, ": ",
        op_str(op), " failed: rank ", op.peer, " is unreachable: ", ucx_status_str(status))));
  }
  return std::make_exception_ptr(TransportError(str(
      "ferry: ucx transport on rank ", rank_, ": ", op_str(op), " failed: ",
      ucx_status_str(status))));
}

void UcxComm::finish(UcxOp& op, std::exception_ptr error) {
  op.error = std::move(error);
  op.done.store(true, std::memory_order_release);
  if (worker_) worker_->note_completion();
}

void UcxComm::on_send_done(void* request, ucs_status_t status, void* user_data) {
  auto* leg = static_cast<UcxLeg*>(user_data);
  leg->op->comm->leg_done(leg, status, 0, 0);
  ucp_request_free(request);
}

void UcxComm::on_recv_done(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                           void* user_data) {
  auto* leg = static_cast<UcxLeg*>(user_data);
  leg->op->comm->leg_done(leg, status, info != nullptr ? info->length : 0,
                          info != nullptr ? info->sender_tag : 0);
  ucp_request_free(request);
}

void UcxComm::on_am_sent(void* request, ucs_status_t status, void* user_data) {
  (void)status;  // best effort: a peer we cannot tell is left to its deadline
  static_cast<AmSend*>(user_data)->done = true;
  ucp_request_free(request);
}

template <class Hit, class MakeError>
void UcxComm::fail_pending(Hit hit, MakeError error) {
  std::vector<std::shared_ptr<UcxOp>> hits;
  for (auto& [raw, op] : pending_)
    if (!op->done.load(std::memory_order_relaxed) && hit(*op)) hits.push_back(op);
  for (auto& op : hits) {
    op->forced = error(*op);
    // A receive not matched yet is withdrawn (its callback reports `forced`). A send cannot be
    // withdrawn from UCX: it stays registered until UCX lets go, but the caller learns of the
    // failure now instead of waiting for a transfer that a dead peer, or one that gave up, will
    // not finish. A receive whose data is already moving cannot be withdrawn either, and UCX
    // writes into its buffer until it lets go: it finishes then (a dead peer's endpoint is cut
    // for that, see peer_failed; a peer that gave up still finishes its transfer, and a cancel
    // at the caller's deadline cuts one that does not). A CMA read under way writes into the
    // caller's buffer too: the reader finishes the op when it is over (soon: a dead peer's
    // memory is gone, and one that gave up is still readable).
    bool receiving = false;
    for (UcxLeg& leg : op->legs) {
      if (leg.held && !leg.is_send && leg.request != nullptr)
        ucp_request_cancel(worker_->worker(), leg.request);
      receiving = receiving || (leg.held && !leg.is_send);
    }
    if (!op->done.load(std::memory_order_relaxed) && !op->cma.reading && !receiving)
      finish(*op, op->forced);
  }
}

void UcxComm::on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  (void)ep;
  auto* peer = static_cast<PeerArg*>(arg);
  UcxComm* comm = peer->comm;
  const int rank = peer->rank;
  std::string why = str("UCX reported ", ucx_status_str(status),
                        " on the endpoint (the process ended or the connection broke)");
  // This runs inside ucp_worker_progress, which must not be called again from here: the drain
  // and the failing run as a deferred job, which the next waiter or tester runs.
  comm->worker_->defer_locked([comm, rank, why = std::move(why)] {
    auto lock = comm->worker_->lock();
    comm->peer_failed(rank, why);
  });
}

void UcxComm::before_sleep_locked() {
  for (int rank : watch_.take_dead()) peer_failed(rank, "its process ended");
  const auto now = Clock::now();
  for (int rank = 0; rank < size(); ++rank) {
    const Clock::time_point until = receives_wait_until_[rank];
    if (until != Clock::time_point{} && now >= until) fail_receives_from_dead_locked(rank);
  }
}

void UcxComm::drain_locked() {
  // ucp_worker_progress returns 0 once it found nothing more to do; the bound only keeps a
  // peer that is still streaming (over TCP, say) from holding us here.
  for (int i = 0; i < 100000 && ucp_worker_progress(worker_->worker()) != 0; ++i) {
  }
}

bool UcxComm::delivered(uint64_t tag) const {
  ucp_tag_recv_info_t info{};
  return ucp_tag_probe_nb(worker_->worker(), tag, kUcxRecvMask, /*remove=*/0, &info) != nullptr;
}

void UcxComm::append_wake_fds_locked(std::vector<pollfd>& fds) { watch_.append_fds(fds); }

void UcxComm::peer_failed(int rank, const std::string& why) {
  if (!dead_why_[rank].empty() || worker_ == nullptr) return;
  drain_locked();
  dead_why_[rank] = why;
  if (closing_) {
    FERRY_LOG(Info, "ucx", "rank ", rank_, ": rank ", rank, " ended after finalize (", why, ")");
    return;  // nothing is pending with it: every rank passed finalize's handshake
  }
  FERRY_LOG(Info, "ucx", "rank ", rank_, ": rank ", rank, " failed: ", why);
  // A peer that gave up on a group before it ended said why (its give-up message was taken in
  // by the drain): that reason names the failure that started it all. Sends to it fail now.
  fail_pending([&](const UcxOp& op) { return op.peer == rank && op.is_send; },
               [&](const UcxOp& op) { return failure_for(rank, op.tag.group); });
  // Its receives wait a little longer. A message it sent before it ended can still be on its
  // way even though the drain found nothing more: UCX's shared-memory queue into this process
  // is one ring for all senders, read in the order the senders reserved their slots, and a
  // live sender that reserved a slot before the dead one and was descheduled before it
  // finished writing hides every later message until it runs again (a scheduler's time slice
  // on a busy host). What is still missing once that time is over is lost with the peer.
  receives_wait_until_[rank] = Clock::now() + kDeadPeerLastMessages;
}

void UcxComm::fail_receives_from_dead_locked(int rank) {
  receives_wait_until_[rank] = Clock::time_point{};
  drain_locked();
  fail_pending([&](const UcxOp& op) { return op.peer == rank; },
               [&](const UcxOp& op) { return failure_for(rank, op.tag.group); });
  // Receives whose data was moving when it died: its endpoint goes, and UCX with it lets go.
  if (held_with_locked(rank, /*receives_only=*/true)) cut_off_locked(rank, dead_why_[rank]);
  // A receive UCX still holds after that (a rendezvous whose fragments were to come from the
  // dead process) would keep its op until the caller's deadline: a process that ended sends
  // nothing more, so the op fails now.
  for (auto& [raw, op] : pending_) {
    if (op->peer == rank && !op->done.load(std::memory_order_relaxed) && !op->cma.reading)
      finish(*op, op->forced);
  }
}

void UcxComm::cut_off_locked(int rank, const std::string& why) {
  if (cut_[rank] || worker_ == nullptr) return;
  cut_[rank] = true;
  // Recorded first: what UCX fails below reports this, not a bare UCS_ERR_CANCELED.
  const bool first = dead_why_[rank].empty();
  if (first) dead_why_[rank] = why;
  FERRY_LOG(Info, "ucx", "rank ", rank_, ": closing the endpoint to rank ", rank,
            " with force: ", why);
  if (eps_[rank] != nullptr) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* r = ucp_ep_close_nbx(eps_[rank], &param);
    eps_[rank] = nullptr;
    wait_closed_locked(r);
  }
  if (first) {
    fail_pending([&](const UcxOp& op) { return op.peer == rank; },
                 [&](const UcxOp& op) { return failure_for(rank, op.tag.group); });
  }
}

ucs_status_t UcxComm::on_abandon(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param) {
  (void)header;
  auto* comm = static_cast<UcxComm*>(arg);
  std::string error;
  std::optional<AbandonMessage> m;
  if (header_length != 0 || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    error = str("unexpected form (", header_length, " header bytes, ",
                (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ? "rendezvous" : "eager", ")");
  } else {
    m = decode_abandon(data, length, comm->size(), error);
  }
  if (!m) {
    std::fprintf(stderr, "ferry: ucx transport on rank %d ignored a malformed give-up message: %s\n",
                 comm->rank_, error.c_str());
    return UCS_OK;
  }
  const int rank = m->rank;
  const uint32_t group = m->group;
  FERRY_LOG(Info, "ucx", "rank ", comm->rank_, ": rank ", rank, " gave up on group ", group,
            ": ", m->why);
  comm->abandoned_.emplace(std::make_pair(group, rank), m->why);
  // Finalize's message is not the group's: a rank that gave up still sends it when it ends
  // (with how many collectives it issued, which finalize compares), so its receive stays.
  comm->fail_pending(
      [&](const UcxOp& op) {
        return op.peer == rank && op.tag.group == group && op.tag.seq != kLifecycleSeq;
      },
      [&](const UcxOp&) { return comm->failure_for(rank, group); });
  return UCS_OK;
}

void UcxComm::abandon_group(uint32_t group, const std::string& why) {
  std::vector<AmSend*> sent;
  {
    auto lock = worker_->lock();
    std::erase_if(am_sends_, [](const std::unique_ptr<AmSend>& s) { return s->done; });
    for (int p = 0; p < size(); ++p) {
      // Nothing goes to a peer that is gone: UCX would reach for its shared memory, which
      // went with it.
      if (p == rank_ || !dead_why_[p].empty() || (watch_.watched(p) && watch_.ended(p))) continue;
      auto msg = std::make_unique<AmSend>();
      msg->bytes = encode_abandon(AbandonMessage{rank_, group, why});
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                           UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_AM_SEND_FLAG_EAGER;
      param.cb.send = &UcxComm::on_am_sent;
      param.user_data = msg.get();
      // The message travels as data, not as the AM header, whose size some transports limit.
      void* r = ucp_am_send_nbx(eps_[p], kUcxAbandonAmId, nullptr, 0, msg->bytes.data(),
                                msg->bytes.size(), &param);
      if (!UCS_PTR_IS_PTR(r)) continue;  // sent already, or failed (best effort)
      sent.push_back(msg.get());
      am_sends_.push_back(std::move(msg));  // UCX reads it until on_am_sent
    }
  }
  // AmSend::done is written under the lock; read it there too.
  auto all_done = [&] {
    auto lock = worker_->lock();
    for (AmSend* s : sent)
      if (!s->done) return false;
    return true;
  };
  const auto until = Clock::now() + kAbandonWait;
  while (!sent.empty() && !all_done() && Clock::now() < until)
    worker_->wait_until([] { return false; }, std::min(until, Clock::now() + std::chrono::milliseconds(5)));
}

std::exception_ptr UcxComm::failure_for(int peer, uint32_t group) const {
  // The peer's own reason first: one that gave up and then ended names the root cause.
  auto it = abandoned_.find({group, peer});
  if (it != abandoned_.end()) {
    return std::make_exception_ptr(PeerFailure(str(
        "ferry: world rank ", peer, " gave up on group ", group, " after: ", it->second)));
  }
  if (!dead_why_[peer].empty()) return peer_failure(peer);
  return nullptr;
}

std::exception_ptr UcxComm::peer_failure(int peer) const {
  return std::make_exception_ptr(PeerFailure(
      str("ferry: rank ", peer, " of the ucx world failed (seen from rank ", rank_, "): ",
          dead_why_[peer])));
}

}  // namespace ferry::detail
