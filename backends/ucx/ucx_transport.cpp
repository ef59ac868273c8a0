#include <ferry/backends/ucx/ucx_transport.h>

#include <ferry/backends/ucx/ucx_comm.h>
#include <ferry/backends/ucx/ucx_peer_blob.h>
#include <ferry/backends/ucx/ucx_settings.h>
#include <ferry/backends/ucx/ucx_tag.h>
#include <ferry/backends/ucx/ucx_worker.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>
#include <ferry/runtime/object_pool.h>

#include <unistd.h>

#include <cstring>
#include <mutex>

namespace ferry {
namespace detail {
namespace {

// The host name goes into this rank's published blob (ucx_peer_blob.h).
std::string host_name() {
  char buf[kMaxUcxHostBytes + 1] = {};
  if (gethostname(buf, kMaxUcxHostBytes) != 0) return "?";
  return std::string(buf, strnlen(buf, kMaxUcxHostBytes));
}

// From the thread's pool (object_pool.h), as its op: a message allocates neither once warm.
class UcxRequest final : public Request, public Pooled {
 public:
  UcxRequest(std::shared_ptr<UcxComm> comm, std::shared_ptr<UcxOp> op)
      : Request(op->peer, op->is_send), comm_(std::move(comm)), op_(std::move(op)) {}
  ~UcxRequest() override { cancel(); }

  bool test() override {
    if (done()) return true;
    comm_->worker().try_progress();
    return done();
  }
  bool wait_until(Clock::time_point deadline) override {
    return comm_->worker().wait_until([this] { return done(); }, deadline);
  }
  // A receive is withdrawn from UCX (or, if its data is already moving, waited for briefly and
  // then let go of by closing the endpoint to its peer with force: afterwards nothing lands in
  // its buffer); a send that UCX already started cannot be withdrawn: the request then reports
  // it as withdrawn and its buffer as not let go of. The peer (which gave up on the group too,
  // or died) should never take it, but memory UCX may still read must not be reused.
  void cancel() override {
    if (!done()) comm_->cancel(op_);
  }
  void start_cancel() override {
    if (!done()) comm_->start_cancel(op_);
  }
  void cancel_by(Clock::time_point limit) override {
    if (!done()) comm_->cancel(op_, limit);
  }
  bool let_go() const override { return !done() || !op_->not_let_go; }
  void rethrow_if_failed() override {
    if (done() && op_->error) std::rethrow_exception(op_->error);
  }
  bool filled_layout() const override { return done() && op_->scattered; }

 private:
  bool done() const { return op_->done.load(std::memory_order_acquire); }
  std::shared_ptr<UcxComm> comm_;
  std::shared_ptr<UcxOp> op_;
};

// The side channel: a second worker of this process, with endpoints of its own, that carries
// the timeout diagnosis (OpContext) and nothing else. Why: on shared memory UCX delivers all
// of a rank's incoming messages through one queue that every local sender appends to, read in
// order. A sender stopped (SIGSTOP, a debugger) in the middle of an append holds every later
// entry behind its unfinished one, from every sender, until it runs again: the receiver then
// hears nobody, and its diagnosis would name every peer silent, live ones too. The side
// worker's queue sees no traffic until a diagnosis, so a rank stopped in the middle of the
// data's traffic cannot hold it. Its endpoints are made when a diagnosis first needs them
// (a job that never times out pays only for the worker); until then its worker is never
// progressed. It serves the ranks of this host only: a rank on another host sends over a TCP
// connection of its own, which a stopped sender holds up for nobody else, and an endpoint made
// to another host at diagnosis time would connect then, blocking (UCX 1.13's TCP) for as long as
// the kernel retries a host that stopped answering (a cut link), long past the deadline. The
// diagnosis of a rank on another host goes with the data.
class SideChannel {
 public:
  SideChannel(std::unique_ptr<UcxWorker> worker, int rank, std::vector<UcxPeerInfo> peers)
      : worker_(std::move(worker)), rank_(rank), peers_(std::move(peers)) {}

  // The side channel's comm, or null when it could not be made (the diagnosis then takes the
  // data's channel, as it did before there was a side channel).
  std::shared_ptr<UcxComm> comm() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!comm_ && worker_) {
      try {
        comm_ = std::make_shared<UcxComm>(std::move(worker_), rank_, peers_, UcxChannel::Side);
      } catch (const std::exception& e) {
        FERRY_LOG(Warn, "ucx", "rank ", rank_, ": no side channel for the timeout diagnosis (",
                  e.what(), "); it goes with the data");
      }
      worker_.reset();
    }
    return comm_;
  }
  void begin_closing() {
    std::lock_guard<std::mutex> lock(mu_);
    if (comm_) comm_->begin_closing();
  }
  // Whether the diagnosis with `peer` takes this channel (peers_ does not change).
  bool serves(int peer) const { return peers_[static_cast<size_t>(peer)].local; }

 private:
  std::mutex mu_;
  std::unique_ptr<UcxWorker> worker_;  // until comm_ is made
  int rank_;
  std::vector<UcxPeerInfo> peers_;
  std::shared_ptr<UcxComm> comm_;
};

class UcxTransport final : public Transport {
 public:
  UcxTransport(std::shared_ptr<UcxComm> comm, std::unique_ptr<SideChannel> side)
      : comm_(std::move(comm)), side_(std::move(side)) {}

  std::string name() const override { return "ucx"; }
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  int ranks_on_host() const override { return comm_->ranks_on_host(); }

  std::unique_ptr<Request> isend(int dst, const Tag& tag, const void* data,
                                 size_t bytes) override {
    return post(dst, tag, true, const_cast<void*>(data), bytes);
  }
  std::unique_ptr<Request> irecv(int src, const Tag& tag, void* data, size_t bytes) override {
    return post(src, tag, false, data, bytes);
  }
  void abandon_group(uint32_t group, const std::string& why) override {
    comm_->abandon_group(group, why);
  }
  void peers_closing() override {
    comm_->begin_closing();
    side_->begin_closing();
  }

 protected:
  // A CMA read scatters into the layout itself when its pieces are large enough; data that
  // comes through UCX lands in the staging buffer and is unpacked from there.
  std::unique_ptr<Request> irecv_staged(int src, const Tag& tag, void* staging, size_t bytes,
                                        const ByteLayout& layout) override {
    auto op = make_op(src, tag, false, bytes);
    if (cma_worth_scattering(layout)) op->scatter = layout;
    return start(comm_, std::move(op), staging);
  }

 private:
  static std::shared_ptr<UcxOp> make_op(int peer, const Tag& tag, bool is_send, size_t bytes) {
    auto op = make_pooled<UcxOp>();
    op->peer = peer;
    op->tag = tag;
    op->is_send = is_send;
    op->bytes = bytes;
    return op;
  }
  static std::unique_ptr<Request> start(const std::shared_ptr<UcxComm>& comm,
                                        std::shared_ptr<UcxOp> op, void* data) {
    comm->post(op, data);
    return std::make_unique<UcxRequest>(comm, std::move(op));
  }
  std::unique_ptr<Request> post(int peer, const Tag& tag, bool is_send, void* data,
                                size_t bytes) {
    std::shared_ptr<UcxComm> comm = comm_;
    if (tag.seq == kDiagnosisSeq && side_->serves(peer)) {
      if (std::shared_ptr<UcxComm> side = side_->comm()) comm = std::move(side);
    }
    return start(comm, make_op(peer, tag, is_send, bytes), data);
  }

  std::shared_ptr<UcxComm> comm_;
  std::unique_ptr<SideChannel> side_;
};

}  // namespace
}  // namespace detail

std::shared_ptr<Transport> make_ucx_transport(int rank, int size,
                                              const BlobAllGather& all_gather) {
  FERRY_CHECK(size >= 1 && rank >= 0 && rank < size, InvalidArgument,
              "make_ucx_transport: rank must be in [0, size), given rank ", rank, " of ", size);
  FERRY_CHECK(size <= detail::kUcxMaxRanks, InvalidArgument, "make_ucx_transport: at most ",
              detail::kUcxMaxRanks, " ranks fit the UCX transport's tags, given ", size);
  auto worker = std::make_unique<detail::UcxWorker>(size);
  std::unique_ptr<detail::UcxWorker> side_worker;
  detail::with_small_shm_receive_pools([&] { side_worker = worker->sibling(); });
  const std::string host = detail::host_name();
  std::vector<std::string> blobs = all_gather(detail::encode_ucx_peer_blob(
      detail::UcxPeerBlob{host, detail::self_process_id(), detail::cma_self_token(),
                          worker->address(), side_worker->address()}));
  FERRY_CHECK(static_cast<int>(blobs.size()) == size, TransportError, "ucx transport on rank ",
              rank, ": the address exchange returned ", blobs.size(), " addresses for a world of ",
              size);
  std::vector<detail::UcxPeerInfo> peers;
  int local = 0;
  for (int r = 0; r < size; ++r) {
    detail::UcxPeerBlob peer = detail::decode_ucx_peer_blob(blobs[r], rank, r);
    const bool same_host = peer.host == host;
    local += same_host ? 1 : 0;
    peers.push_back(detail::UcxPeerInfo{std::move(peer.address), std::move(peer.side_address),
                                        same_host, peer.process, peer.token});
  }
  auto comm = std::make_shared<detail::UcxComm>(std::move(worker), rank, peers);
  FERRY_LOG(Info, "ucx", "rank ", rank, " of ", size, ": UCP worker ready, ", local,
            " ranks on this host");
  auto side = std::make_unique<detail::SideChannel>(std::move(side_worker), rank, std::move(peers));
  return std::make_shared<detail::UcxTransport>(std::move(comm), std::move(side));
}

}  // namespace ferry
