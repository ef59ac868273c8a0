// UcxComm's side of the CMA protocol (see ucx_cma.h for the protocol, ucx_comm.h for the ops
// and their legs). Everything runs under the worker's lock except the read in read_from_peer.
#include <ferry/backends/ucx/ucx_comm.h>

#include <ferry/backends/ucx/ucx_tag.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <cstring>

namespace ferry::detail {

void UcxComm::post_cma_send(const std::shared_ptr<UcxOp>& op, uint64_t tag) {
  uint64_t& cookie = cma_cookie_[op->peer];
  cookie = cookie % kUcxMaxCmaCookie + 1;  // 1, 2, ...: 2^47 messages before it wraps
  op->cma.desc = CmaDescriptor{cookie, reinterpret_cast<uint64_t>(op->data), op->bytes};
  encode_cma_descriptor(op->cma.desc, op->cma.desc_wire);
  // The acknowledgement's receive first, so that it is posted whenever the answer comes.
  post_leg(op, LegKind::AckRecv, false, op->cma.ack_wire, kCmaAckBytes,
           pack_ucx_cma_tag(op->peer, CmaTagKind::Ack, cookie));
  if (op->done.load(std::memory_order_relaxed)) return;  // UCX refused it
  post_leg(op, LegKind::Descriptor, true, op->cma.desc_wire, kCmaDescriptorBytes,
           tag | kUcxCmaDescriptorBit);
  cma_counters().descriptors_sent.fetch_add(1, std::memory_order_relaxed);
}

void UcxComm::on_descriptor(const std::shared_ptr<UcxOp>& op, size_t length) {
  // It arrived in the caller's buffer (the receive did not know which form would come; the
  // read overwrites it), or in the op's own for a receive smaller than a descriptor.
  std::string why;
  std::optional<CmaDescriptor> d =
      decode_cma_descriptor(op->cma.bounced ? op->cma.desc_wire : op->data, length, why);
  if (!d) {
    // Its cookie cannot be trusted, so no answer: the sender, if it is one, fails when this
    // rank gives up on the group.
    settle(*op, std::make_exception_ptr(TransportError(str(
        "ferry: ucx transport on rank ", rank_, ": rank ", op->peer, " sent a malformed CMA "
        "descriptor for ", tag_str(op->tag), ": ", why))));
    return;
  }
  op->cma.desc = *d;
  if (d->bytes != op->bytes) {
    send_ack(op, CmaAckStatus::Mismatch, op->bytes);
    settle(*op, std::make_exception_ptr(MismatchError(str(
        "ferry: rank ", op->peer, " sent ", d->bytes, " bytes to rank ", rank_, " for ",
        tag_str(op->tag), " but rank ", rank_, " expected ", op->bytes,
        " bytes: the ranks called the collective with different sizes"))));
    return;
  }
  if (op->forced) {
    send_ack(op, CmaAckStatus::Withdrawn, 0);
    settle(*op, nullptr);
    return;
  }
  if (!cma_from_[op->peer]) {
    fall_back(op);
    return;
  }
  op->cma.reading = true;
  worker_->defer_locked([this, op] { read_from_peer(op); });
}

void UcxComm::read_from_peer(const std::shared_ptr<UcxOp>& op) {
  {
    auto lock = worker_->lock();
    if (op->forced) {  // withdrawn, or the peer failed, while the job waited
      op->cma.reading = false;
      if (dead_why_[op->peer].empty()) send_ack(op, CmaAckStatus::Withdrawn, 0);
      settle(*op, nullptr);
      retire_if_idle(op.get());
      worker_->wake_sleepers_locked();
      return;
    }
  }
  // watch_ answers without the lock; cma_from_ was true, so the peer is watched.
  const bool scatter = !op->scatter.runs.empty();
  CmaReadResult read =
      scatter ? cma_read_scattered(watch_.pid(op->peer), op->cma.desc.address, op->scatter)
              : cma_read(watch_.pid(op->peer), op->cma.desc.address, op->data, op->bytes);
  // The pid names the peer for as long as the peer lives: alive after the read, it was the
  // peer's memory that was read throughout.
  if (read.outcome != CmaReadOutcome::Refused && watch_.ended(op->peer))
    read = CmaReadResult{CmaReadOutcome::Gone, ESRCH};
  auto lock = worker_->lock();
  op->cma.reading = false;
  switch (read.outcome) {
    case CmaReadOutcome::Done:
      cma_counters().reads.fetch_add(1, std::memory_order_relaxed);
      cma_counters().bytes_read.fetch_add(op->bytes, std::memory_order_relaxed);
      if (scatter) cma_counters().scattered_reads.fetch_add(1, std::memory_order_relaxed);
      op->scattered = scatter;
      send_ack(op, CmaAckStatus::Done, 0);
      settle(*op, nullptr);
      break;
    case CmaReadOutcome::Refused:
      FERRY_LOG(Info, "ucx", "rank ", rank_, " may not read the memory of rank ", op->peer, " (",
                std::strerror(read.error), "): its large messages come through UCX");
      cma_from_[op->peer] = false;
      if (op->forced) {
        send_ack(op, CmaAckStatus::Withdrawn, 0);
        settle(*op, nullptr);
      } else {
        fall_back(op);
      }
      break;
    case CmaReadOutcome::Gone:
      peer_failed(op->peer, "its process ended");
      settle(*op, peer_failure(op->peer));
      break;
    case CmaReadOutcome::Failed:
      send_ack(op, CmaAckStatus::ReadFailed, static_cast<uint64_t>(read.error));
      settle(*op, std::make_exception_ptr(TransportError(str(
          "ferry: ucx transport on rank ", rank_, ": ", "cannot read the ", op->bytes,
          " bytes that rank ", op->peer, " announced at ", hex(op->cma.desc.address), " for ",
          tag_str(op->tag), ": ", std::strerror(read.error)))));
      break;
  }
  retire_if_idle(op.get());
  worker_->wake_sleepers_locked();  // the op's waiter may sleep: nothing else would wake it
}

void UcxComm::on_ack(const std::shared_ptr<UcxOp>& op, ucs_status_t status, size_t length) {
  if (status != UCS_OK) {  // withdrawn (the peer failed or gave up), or a UCX error
    settle(*op, error_for(*op, status, 0));
    return;
  }
  std::string why;
  std::optional<CmaAck> ack = decode_cma_ack(op->cma.ack_wire, length, why);
  if (ack && ack->cookie != op->cma.desc.cookie) {
    why = str("cookie ", ack->cookie, " instead of ", op->cma.desc.cookie);
    ack.reset();
  }
  if (!ack) {
    settle(*op, std::make_exception_ptr(TransportError(str(
        "ferry: ucx transport on rank ", rank_, ": rank ", op->peer, " answered the CMA "
        "descriptor of the ", op_str(*op), " with a malformed acknowledgement: ", why))));
    return;
  }
  switch (ack->status) {
    case CmaAckStatus::Done:
      settle(*op, nullptr);
      break;
    case CmaAckStatus::Fallback:
      if (cma_to_[op->peer]) {
        FERRY_LOG(Info, "ucx", "rank ", op->peer, " may not read the memory of rank ", rank_,
                  ": large messages to it go through UCX");
        cma_to_[op->peer] = false;
      }
      // Once the op finished (withdrawn), its buffer may be gone: a zero-byte payload tells the
      // receiver, which waits for the data, that none will come.
      if (op->done.load(std::memory_order_relaxed) || op->forced) {
        post_leg(op, LegKind::Payload, true, nullptr, 0,
                 pack_ucx_cma_tag(rank_, CmaTagKind::Payload, op->cma.desc.cookie));
        settle(*op, nullptr);
      } else {
        post_leg(op, LegKind::Payload, true, op->data, op->bytes,
                 pack_ucx_cma_tag(rank_, CmaTagKind::Payload, op->cma.desc.cookie));
      }
      break;
    case CmaAckStatus::Mismatch:
      settle(*op, std::make_exception_ptr(MismatchError(str(
          "ferry: rank ", rank_, " sent ", op->bytes, " bytes to rank ", op->peer, " for ",
          tag_str(op->tag), " but rank ", op->peer, " expected ", ack->value,
          " bytes: the ranks called the collective with different sizes"))));
      break;
    case CmaAckStatus::Withdrawn:
      settle(*op, std::make_exception_ptr(PeerFailure(str(
          "ferry: rank ", op->peer, " withdrew its receive of the ", op_str(*op),
          " (it gave up; seen from rank ", rank_, ")"))));
      break;
    case CmaAckStatus::ReadFailed:
      settle(*op, std::make_exception_ptr(TransportError(str(
          "ferry: ucx transport on rank ", rank_, ": rank ", op->peer, " could not read the ",
          op_str(*op), " from this rank's memory: ",
          std::strerror(static_cast<int>(ack->value))))));
      break;
  }
}

void UcxComm::send_ack(const std::shared_ptr<UcxOp>& op, CmaAckStatus status, uint64_t value) {
  if (!dead_why_[op->peer].empty()) return;
  encode_cma_ack(CmaAck{op->cma.desc.cookie, status, value}, op->cma.ack_wire);
  post_leg(op, LegKind::AckSend, true, op->cma.ack_wire, kCmaAckBytes,
           pack_ucx_cma_tag(rank_, CmaTagKind::Ack, op->cma.desc.cookie));
}

void UcxComm::fall_back(const std::shared_ptr<UcxOp>& op) {
  cma_counters().fallbacks.fetch_add(1, std::memory_order_relaxed);
  send_ack(op, CmaAckStatus::Fallback, 0);
  post_leg(op, LegKind::Payload, false, op->data, op->bytes,
           pack_ucx_cma_tag(op->peer, CmaTagKind::Payload, op->cma.desc.cookie));
}

}  // namespace ferry::detail
