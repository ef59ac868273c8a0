// The UCX world of this process (internal): the worker, an endpoint to every rank, the
// operations UCX holds, and what this rank knows about dead peers and abandoned groups.
//
// Failure model. Endpoints use UCP_ERR_HANDLING_MODE_PEER: when UCX finds a peer dead (a broken
// connection, or the keepalive finding that the process is gone) it calls on_ep_error, and
// every pending and later request with that rank fails with PeerFailure naming it. UCX fails
// the sends on that endpoint itself; tagged receives are not tied to an endpoint, so ferry
// keeps its own list of pending operations per peer and cancels the receives. A rank that gives
// up on a group sends an active message to every peer; they fail their pending and later
// requests with it in that group the same way (it is alive, but will never answer there).
//
// A peer that is alive but silent (stopped, or stuck outside ferry) fails nothing by itself:
// ops with it end at their deadlines, and are withdrawn (cancel). A withdrawn receive must
// leave its buffer alone, but UCX cannot withdraw one whose data is already moving: if that
// data stops coming, the endpoint to the peer is closed with force (cut_off_locked), which
// makes UCX let go, and every op with that peer fails from then on. At the end, endpoints to
// such peers (and to any peer UCX still holds a request with) close with force too: a flush
// would wait for them, and the worker's end must find no request left on an endpoint.
//
// Large messages to ranks on this host take ferry's CMA protocol (ucx_cma.h): the receiver
// reads them from the sender's memory. Its reads run outside the lock (deferred jobs of the
// worker); everything else here runs under the worker's lock (UCX callbacks too, since they run
// inside ucp_worker_progress); only UcxOp::done is read without it.
#pragma once

#include <ferry/backends/transport.h>
#include <ferry/backends/ucx/peer_watch.h>
#include <ferry/backends/ucx/ucx_cma.h>
#include <ferry/backends/ucx/ucx_worker.h>
#include <ferry/runtime/object_pool.h>

#include <ucp/api/ucp.h>

#include <atomic>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ferry::detail {

class UcxComm;
struct UcxOp;

// One UCX request of an op. A plain op has one, its data; an op carried by the CMA protocol
// (ucx_cma.h) has at most two at a time.
enum class LegKind : uint8_t {
  Data,        // the op's own send or receive (a receive may get a CMA descriptor instead)
  Payload,     // the data through UCX after a CMA fallback (either side)
  Descriptor,  // sender: the CMA descriptor
  AckRecv,     // sender: the receiver's acknowledgement
  AckSend,     // receiver: the acknowledgement
};
struct UcxLeg {
  UcxOp* op = nullptr;
  LegKind kind = LegKind::Data;
  bool is_send = false;
  bool held = false;        // UCX holds it: its callback has not run yet
  void* request = nullptr;  // UCX's request, while held
};

// What an op carried by the CMA protocol (ucx_cma.h) keeps: the wire bytes UCX sends or
// receives live here, in the op, which outlives its legs.
struct CmaState {
  CmaDescriptor desc;  // the descriptor this op sent or received
  unsigned char desc_wire[kCmaDescriptorBytes] = {};
  unsigned char ack_wire[kCmaAckBytes] = {};
  // A receive smaller than a descriptor is posted into `desc_wire` instead of the caller's
  // buffer and copied out when the data came, so that a descriptor sent to it can still be
  // decoded and answered (Mismatch) instead of being truncated by UCX.
  bool bounced = false;
  // While the receiver's read is queued or running outside the lock: the op must not finish
  // meanwhile (the read writes into the caller's buffer).
  bool reading = false;
};

// One posted send or receive.
struct UcxOp {
  UcxComm* comm = nullptr;  // set by post(); UCX callbacks reach the comm through it
  int peer = 0;  // world rank
  Tag tag;
  bool is_send = false;
  size_t bytes = 0;
  void* data = nullptr;  // the caller's buffer
  // A laid-out receive staged in `data` (Transport::irecv_staged) whose pieces are large enough
  // (cma_worth_scattering): a CMA read writes them straight into this layout instead, and sets
  // `scattered` before `done`; data that comes through UCX still lands in `data`.
  ByteLayout scatter;
  bool scattered = false;
  UcxLeg legs[2];
  CmaState cma;
  std::exception_ptr forced;      // the error to report whatever UCX says (peer failed, ...)
  // When the op was withdrawn (start_cancel): its grace counts from then. Under the lock.
  Clock::time_point withdrawn_at{};
  bool peer_quiet = false;  // nothing more was expected from `peer` when it was withdrawn
  // A withdrawn receive that UCX would not let go of even after its endpoint was closed, or a
  // withdrawn send it still holds: its buffer may still be written, or read (Request::let_go).
  // Set before `done`.
  bool not_let_go = false;
  std::exception_ptr error;       // the outcome; written before `done`
  std::atomic<bool> done{false};  // the caller may look at `error`
};

// "send to rank 3 for <tag>", for messages.
std::string op_str(const UcxOp& op);

// What each rank publishes about itself, besides its worker address.
struct UcxPeerInfo {
  std::string address;  // UCP worker address
  std::string side_address;  // the side channel's worker (ucx_transport.cpp)
  bool local = false;   // runs on this host
  ProcessId process;
  CmaToken token;       // checked before reading its memory (ucx_cma.h)
};

// Which of a rank's two workers a UcxComm runs on: the data's, or the side channel's, which
// carries only the few bytes of a timeout diagnosis (ucx_transport.cpp says why). The side
// channel has no CMA protocol and no give-up messages, a peer it cannot reach counts as failed
// instead of failing the whole channel, and its endpoints always close with force (it holds
// nothing worth a flush).
enum class UcxChannel : uint8_t { Data, Side };

class UcxComm final : public UcxSleepHook {
 public:
  UcxComm(std::unique_ptr<UcxWorker> worker, int rank, const std::vector<UcxPeerInfo>& peers,
          UcxChannel channel = UcxChannel::Data);
  ~UcxComm() override;
  UcxComm(const UcxComm&) = delete;
  UcxComm& operator=(const UcxComm&) = delete;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(eps_.size()); }
  // The ranks on this host, this one included.
  int ranks_on_host() const { return local_ranks_; }
  UcxWorker& worker() { return *worker_; }

  // Posts `op` (peer, tag, is_send, bytes set) on `data`. Never throws for a failed peer: the
  // op then finishes at once with PeerFailure.
  void post(const std::shared_ptr<UcxOp>& op, void* data);
  // Withdraws an unfinished op (see UcxRequest::cancel for what that guarantees), waiting for a
  // receive whose data is moving until its grace ends or `limit`, whichever comes first.
  void cancel(const std::shared_ptr<UcxOp>& op, Clock::time_point limit = Clock::time_point::max());
  // The first half of cancel: asks UCX to let go of the op's receive and starts its grace,
  // without waiting (Request::start_cancel).
  void start_cancel(const std::shared_ptr<UcxOp>& op);
  // Tells every live peer that this rank gave up on `group`; waits briefly for the messages to
  // leave.
  void abandon_group(uint32_t group, const std::string& why);
  // Every rank passed finalize's handshake (Transport::peers_closing): peers that end from now
  // on finished, and the endpoints close without a flush (there is nothing left to send, and a
  // flush could reach for a peer that is gone).
  void begin_closing();

 private:
  struct PeerArg {
    UcxComm* comm;
    int rank;
  };
  struct AmSend {
    std::string bytes;
    bool done = false;
  };

  // Hands one leg of `op` to UCX (a receive matches `tag` under `mask`).
  void post_leg(const std::shared_ptr<UcxOp>& op, LegKind kind, bool is_send, void* buffer,
                size_t length, uint64_t tag, uint64_t mask = ~uint64_t{0});
  // UCX finished `leg` with `status` (`length` bytes and the sender's tag for a receive).
  void leg_done(UcxLeg* leg, ucs_status_t status, size_t length, uint64_t sender_tag);
  // Finishes `op` with `error` (or with `forced`, if set), unless it finished already.
  void settle(UcxOp& op, std::exception_ptr error);
  // Drops `op` from pending_ once UCX holds none of its legs and no read is under way.
  void retire_if_idle(UcxOp* op);
  // The error for a leg of `op` that UCX finished with `status` (`length` bytes received).
  std::exception_ptr error_for(const UcxOp& op, ucs_status_t status, size_t length) const;

  // The CMA protocol (ucx_comm_cma.cpp).
  void post_cma_send(const std::shared_ptr<UcxOp>& op, uint64_t tag);
  void on_descriptor(const std::shared_ptr<UcxOp>& op, size_t length);
  void read_from_peer(const std::shared_ptr<UcxOp>& op);  // a deferred job: without the lock
  void on_ack(const std::shared_ptr<UcxOp>& op, ucs_status_t status, size_t length);
  void send_ack(const std::shared_ptr<UcxOp>& op, CmaAckStatus status, uint64_t value);
  void fall_back(const std::shared_ptr<UcxOp>& op);

  static void on_send_done(void* request, ucs_status_t status, void* user_data);
  static void on_recv_done(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                           void* user_data);
  static void on_am_sent(void* request, ucs_status_t status, void* user_data);
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t on_abandon(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param);

  void finish(UcxOp& op, std::exception_ptr error);
  // Fails the pending ops for which `hit` holds with `error()`: receives are cancelled in UCX
  // and finish when UCX lets go of them (at once, unless their data is moving: never before,
  // since UCX writes into their buffers until then); sends finish at once (UCX may still hold
  // them; they stay registered until it lets go).
  template <class Hit, class MakeError>
  void fail_pending(Hit hit, MakeError error);
  // A peer ended or broke: first takes in everything it delivered (drain_locked), then fails
  // the sends to it at once and its receives kDeadPeerLastMessages later (the .cpp says why):
  // `rank`'s process may be gone while its last messages wait in this rank's shared memory,
  // unread.
  void peer_failed(int rank, const std::string& why);
  // The end of that wait: fails the receives from `rank` still pending.
  void fail_receives_from_dead_locked(int rank);
  void drain_locked();
  // Takes and drops the messages that arrived for receives never posted (a peer's data for a
  // collective this rank gave up on), so that UCX does not warn of them when the worker ends.
  void discard_unexpected_locked();
  // Withdraws the receives UCX still holds when the worker is about to end (a CMA send's wait
  // for an acknowledgement its peer, which withdrew the receive, never sends): a tag receive
  // belongs to the worker, not to an endpoint, so closing the endpoints does not release it,
  // and UCX would warn at the worker's end of a request never returned.
  void release_held_receives_locked();
  // Whether a message from `peer` that a receive with `tag` would take has arrived already (it
  // may outlive its sender: a receive posted after the sender ended still gets it).
  bool delivered(uint64_t tag) const;
  void before_sleep_locked() override;
  void append_wake_fds_locked(std::vector<pollfd>& fds) override;
  void close_endpoints();  // under the lock
  // Closes the endpoint to `rank` with force (ucx_comm_close.cpp): UCX then lets go of every
  // request it holds with that rank, a receive whose data was moving among them, so that no
  // byte from it lands in a caller's buffer later. Every pending and later op with `rank` fails
  // (with `why`, unless it failed already). Under the lock, never inside a UCX callback.
  void cut_off_locked(int rank, const std::string& why);
  // Progresses until the close request `r` (from ucp_ep_close_nbx) completed, within a bound,
  // and releases it.
  void wait_closed_locked(void* r);
  // Whether UCX holds a leg of an op with `rank` (a receive leg only, if `receives_only`).
  bool held_with_locked(int rank, bool receives_only) const;
  // The error an op with `peer` in `group` must fail with at once, or null.
  std::exception_ptr failure_for(int peer, uint32_t group) const;
  std::exception_ptr peer_failure(int peer) const;

  std::unique_ptr<UcxWorker> worker_;
  int rank_;
  int local_ranks_ = 0;  // ranks on this host (peers marked local), this one included
  bool side_;  // UcxChannel::Side
  std::vector<ucp_ep_h> eps_;
  std::vector<PeerArg> peer_args_;
  std::vector<std::string> dead_why_;  // "" while the peer lives
  // How long the receives from a peer that ended still wait for what it sent before (checked
  // before every sleep, which lasts a sleep slice at most).
  static constexpr auto kDeadPeerLastMessages = std::chrono::milliseconds(500);
  // Per peer: until when its receives wait (peer_failed); zero when they do not.
  std::vector<Clock::time_point> receives_wait_until_;
  bool closing_ = false;               // begin_closing() was called
  // Peers with which an op was withdrawn unfinished (a deadline expired, or the caller gave up
  // after another failure): their endpoints close with force at the end, since a flush would
  // wait for a peer that may never answer.
  std::vector<bool> unanswered_;
  std::vector<bool> cut_;  // cut_off_locked ran: the endpoint is gone, nothing more is posted
  std::map<std::pair<uint32_t, int>, std::string> abandoned_;  // (group, rank) -> why
  // Ops UCX holds, or being read; the map's nodes from the thread's pool (object_pool.h), so
  // that a message allocates none once warm.
  std::unordered_map<UcxOp*, std::shared_ptr<UcxOp>, std::hash<UcxOp*>, std::equal_to<UcxOp*>,
                     PoolAllocator<std::pair<UcxOp* const, std::shared_ptr<UcxOp>>>>
      pending_;
  std::vector<std::unique_ptr<AmSend>> am_sends_;
  PeerWatch watch_;
  // CMA: the smallest message sent by it (SIZE_MAX: off); to which ranks this rank sends
  // descriptors, and from which it reads (both become false for a rank that refused or was
  // refused); the last cookie used with each rank.
  size_t cma_min_bytes_;
  std::vector<bool> cma_to_, cma_from_;
  std::vector<uint64_t> cma_cookie_;
};

}  // namespace ferry::detail
