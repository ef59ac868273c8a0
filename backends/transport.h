// The transport interface: tagged, non-blocking point-to-point between the ranks of one world.
//
// ferry's collective algorithms (collectives/algorithms/) are written once over this interface,
// so a transport only has to move bytes; one that can also carry collectives itself (MPI) offers
// them through native_collectives.h. Sends and receives match on (source, tag) in posting
// order, as in MPI. A send may complete only when its receive has been posted (rendezvous): the
// sender's buffer must stay untouched until its request completes. A receive must be posted
// with exactly the number of bytes the matching send carries; otherwise both fail with
// MismatchError.
#pragma once

#include <ferry/backends/byte_layout.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ferry {

class NativeCollectives;

using Clock = std::chrono::steady_clock;

// Names one message: which group, which operation, which part of the operation.
struct Tag {
  uint32_t group = 0;  // group id, unique within the process while the group lives
  uint32_t slot = 0;   // algorithm step, or the user's tag for send/recv
  uint64_t seq = 0;    // collective sequence number in the group (kP2PSeq for send/recv)
  // A hash of the collective's fingerprint (collectives/engine/fingerprint.h), 0 for messages
  // that are not a collective's: two ranks that run different collectives at the same sequence
  // number post messages that never match, instead of combining each other's data. A transport
  // matches on it (local: all of it; ucx: folded into the tag's sequence bits).
  uint32_t check = 0;
  friend bool operator==(const Tag&, const Tag&) = default;
};
// User send/recv do not advance a group's collective sequence; they use this one.
inline constexpr uint64_t kP2PSeq = ~uint64_t{0};
// The exchange that names the missing ranks after a collective timed out (OpContext).
inline constexpr uint64_t kDiagnosisSeq = kP2PSeq - 1;
// The world handshakes of init and finalize (world_handshake.h); the slot says which.
inline constexpr uint64_t kLifecycleSeq = kP2PSeq - 2;

std::string tag_str(const Tag& tag);

// One posted send or receive.
class Request {
 public:
  virtual ~Request() = default;
  // True once the request finished, successfully or not. Never blocks.
  virtual bool test() = 0;
  // Blocks (without spinning for long) until finished or `deadline`; false on expiry.
  virtual bool wait_until(Clock::time_point deadline) = 0;
  // Withdraws an unfinished request: afterwards the transport no longer touches its buffer
  // (unless let_go() says otherwise). Used when a deadline expired. No effect on a finished
  // request. A transfer already under way is given a grace to finish first (the transport's).
  virtual void cancel() = 0;
  // The two halves of cancel, for withdrawing several requests at once (cancel_all): asks the
  // transport to let go without waiting for it to confirm; then cancel_by waits as cancel does,
  // its grace counted from start_cancel and ending at `limit` at the latest. The graces of
  // several requests then overlap instead of adding up.
  virtual void start_cancel() {}
  virtual void cancel_by(Clock::time_point limit) {
    (void)limit;
    cancel();
  }
  // After a cancel: false when the transport could not confirm that it let go of the buffer
  // (MPI cannot withdraw a receive whose data is moving, and MPICH cannot withdraw a send): it
  // may still write into a receive's buffer, or read a send's, whenever the peer goes on, so
  // that memory must never be freed or reused.
  virtual bool let_go() const { return true; }
  // After the request finished: throws its error (MismatchError, PeerFailure, TransportError).
  virtual void rethrow_if_failed() = 0;
  // A receive posted by Transport::irecv_staged that wrote its bytes straight into the layout
  // (its staging buffer holds nothing to unpack). Asked once the request finished successfully.
  virtual bool filled_layout() const { return false; }

  int peer() const { return peer_; }
  bool is_send() const { return is_send_; }

 protected:
  Request(int peer, bool is_send) : peer_(peer), is_send_(is_send) {}
  int peer_;
  bool is_send_;
};

// Withdraws every request in `requests` (null entries skipped) as cancel() does, but with their
// waits overlapping: each is asked to let go first, then each is waited for, so that k transfers
// under way cost one grace rather than k; no wait goes past `limit`. Returns whether the
// transport let go of every buffer (Request::let_go).
template <class Requests>
bool cancel_all(Requests& requests, Clock::time_point limit = Clock::time_point::max()) {
  for (auto& r : requests)
    if (r) r->start_cancel();
  bool all = true;
  for (auto& r : requests) {
    if (!r) continue;
    r->cancel_by(limit);
    all = all && r->let_go();
  }
  return all;
}

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string name() const = 0;  // "local", "mpi", "ucx"
  virtual int rank() const = 0;          // rank in the world
  virtual int size() const = 0;          // world size

  // `dst` / `src` are world ranks. Zero-byte messages are legal and still match.
  virtual std::unique_ptr<Request> isend(int dst, const Tag& tag, const void* data,
                                         size_t bytes) = 0;
  virtual std::unique_ptr<Request> irecv(int src, const Tag& tag, void* data, size_t bytes) = 0;
  // A send or receive of layout.bytes() bytes laid out by `layout` (byte_layout.h) instead of
  // contiguous; matched and checked like isend / irecv, and it matches either of them on the
  // other side. These versions pack into (unpack out of) a staging buffer of their own around
  // isend / irecv; a transport that can copy through the layout directly overrides them.
  virtual std::unique_ptr<Request> isend_layout(int dst, const Tag& tag, ByteLayout layout);
  virtual std::unique_ptr<Request> irecv_layout(int src, const Tag& tag, ByteLayout layout);

  // This rank gives up on group `group` after an error (the group is poisoned here): the
  // peers' pending and later messages with this rank in that group fail with PeerFailure, so
  // that a rank waiting on us fails at once instead of at its deadline, and in turn gives up.
  // Best effort; a transport that cannot tell its peers leaves them to their deadlines.
  virtual void abandon_group(uint32_t group, const std::string& why) {
    (void)group;
    (void)why;
  }

  // Every rank has said that it sends nothing more (finalize's handshake, world_handshake.h): a
  // peer that ends from now on has finished, not failed.
  virtual void peers_closing() {}

  // How many ranks of this job run on this rank's host (0: the transport does not know). The
  // engine compares it with the host's cores to decide whether a background thread of this
  // rank has a core of its own or takes one from a rank.
  virtual int ranks_on_host() const { return 0; }

  // Whether world rank `peer` ended without failing (a local rank whose function returned), as
  // opposed to one that failed or gave up on a group: a rank waiting for it then knows that it
  // issued fewer collectives, which finalize and run_ranks report. False when unknown.
  virtual bool peer_ended(int peer) const {
    (void)peer;
    return false;
  }

  // The transport's own collectives for the world group (null: the engine's algorithms over
  // isend/irecv carry them). Called once per world Group; see native_collectives.h.
  virtual std::shared_ptr<NativeCollectives> native_world() { return nullptr; }

  // The host key (host_identity.h) of world rank `rank`: ranks with equal keys can share memory.
  // Learnt in init's handshake (world_handshake.h); 0 (unknown) before it, on a transport made
  // outside init, and on the local transport, whose ranks share a process and need no segment.
  uint64_t host_key(int rank) const {
    if (!host_keys_known_.load(std::memory_order_acquire)) return 0;
    return rank >= 0 && rank < static_cast<int>(host_keys_.size()) ? host_keys_[rank] : 0;
  }
  // Once, before any collective (init's handshake): one key per world rank.
  void set_host_keys(std::vector<uint64_t> keys) {
    if (host_keys_known_.load(std::memory_order_acquire)) return;
    host_keys_ = std::move(keys);
    host_keys_known_.store(true, std::memory_order_release);
  }

  // Group ids: every process proposes its next free id when a group is split and all adopt the
  // largest proposal, so ids stay unique within each process (see Group::split).
  uint32_t propose_group_id() const { return next_group_id_.load(); }
  void adopt_group_id(uint32_t id);

 protected:
  // The receive behind irecv_layout's staging: `bytes` into `staging`, for `layout`. A transport
  // that can at times write straight into the layout (UCX's CMA reads, which scatter) overrides
  // it; its request then says so through Request::filled_layout, and the unpack is skipped.
  virtual std::unique_ptr<Request> irecv_staged(int src, const Tag& tag, void* staging,
                                                size_t bytes, const ByteLayout& layout) {
    (void)layout;
    return irecv(src, tag, staging, bytes);
  }

 private:
  std::atomic<uint32_t> next_group_id_{1};  // 0 is the world group
  std::vector<uint64_t> host_keys_;          // by world rank, written once (set_host_keys)
  std::atomic<bool> host_keys_known_{false};
};

}  // namespace ferry
