// send and recv: posted straight to the transport from the calling thread. They match by
// (peer, tag) in posting order and do not take a collective sequence number, so they never
// disturb the order of collectives.
#include <ferry/collectives/engine/engine.h>
#include <ferry/collectives/engine/in_flight_work.h>
#include <ferry/runtime/config.h>

#include <mutex>
#include <vector>

namespace ferry {
namespace {

// A send or a recv: one transport request.
class RequestInFlight final : public detail::InFlight {
 public:
  RequestInFlight(std::unique_ptr<Request> request, Tensor tensor)
      : tensor_(std::move(tensor)), request_(std::move(request)) {}

  bool test() override { return request_->test(); }
  bool poll_until(Clock::time_point deadline) override { return request_->wait_until(deadline); }
  // A send or a recv has no deadline of its own (its Work waits each caller's), so the engine's
  // full wait never comes: each wait polls until its caller's deadline.
  void wait_to_the_end(detail::GroupImpl&, const char*, uint64_t,
                       Clock::time_point deadline) override {
    if (!request_->wait_until(deadline))
      throw TimeoutError("ferry: a send or recv was not completed by its deadline");
  }
  std::vector<Tensor> finish() override {
    request_->rethrow_if_failed();
    if (!request_->is_send()) tensor_.bump_version();
    return {tensor_};
  }
  detail::OnFailure on_failure() const override { return detail::OnFailure::kOpOnly; }

  // The buffer must not be written after the caller gave up on it. A message the transport
  // could not withdraw (MPI cannot always cancel a send that has started, nor a receive whose
  // data is moving) may still be read or written, so its buffer lives for the rest of the
  // process.
  void cancel() {
    request_->cancel();
    if (request_->test() && request_->let_go()) return;
    static std::mutex mu;
    static auto* kept = new std::vector<Tensor>();  // never freed, on purpose
    std::lock_guard<std::mutex> lock(mu);
    kept->push_back(tensor_);
  }
  // Dropped: withdraws the message (as MPI requires MPI_Wait on every request).
  void let_go() {
    if (!request_->test()) cancel();
  }

 private:
  Tensor tensor_;  // declared before request_: destroyed after it, so that the request is
                   // withdrawn (and a copy in progress finished) while the buffer still lives
  std::unique_ptr<Request> request_;
};

// The Work of a send or a recv. Unlike a collective's, it has no deadline of its own, so it is
// tested by the process's progress thread in the background (no worker runs point-to-point
// requests: InFlightWork::progress), and a wait that expired withdraws the message; the group
// is poisoned all the same.
class RequestWork final : public detail::InFlightWork {
 public:
  RequestWork(std::string description, detail::OpDescription op, std::unique_ptr<Request> request,
              Tensor tensor)
      : InFlightWork(std::move(op), Clock::time_point::max(),
                     std::make_unique<RequestInFlight>(std::move(request), std::move(tensor)),
                     {}),
        description_(std::move(description)) {}

  ~RequestWork() override {
    std::unique_ptr<detail::InFlight> pending = take_pending();
    if (pending) static_cast<RequestInFlight&>(*pending).let_go();
  }

  std::string description() const override { return description_; }

 protected:
  void give_up(const std::string& why) override {
    if (auto group = group_of_op()) detail::poison_after_wait_timeout(*group, why);
    DriveLock drive(*this);
    drive.lock();
    if (pending() != nullptr) static_cast<RequestInFlight*>(pending())->cancel();
  }

 private:
  std::string description_;
};

Work post(const char* op, const Tensor& tensor, int peer, const Group& group, int tag, bool is_send) {
  detail::Validator v(op, group);
  v.defined(tensor, "tensor");
  if (peer < 0 || peer >= group.size() || peer == group.rank())
    v.fail(detail::str(is_send ? "dst" : "src", " must be another rank in [0, ", group.size(),
                       "), given ", peer));
  if (tag < 0) v.fail(detail::str("tag must be >= 0, given ", tag));
  detail::GroupImpl& g = group.impl();
  g.throw_if_poisoned(op);
  const Tag t{g.id(), static_cast<uint32_t>(tag), kP2PSeq, 0};
  const int world_peer = g.members()[peer];
  Tensor handle = tensor;
  std::unique_ptr<Request> request =
      is_send ? g.transport().isend(world_peer, t, handle.raw_data(), handle.nbytes())
              : g.transport().irecv(world_peer, t, handle.raw_data(), handle.nbytes());
  auto state = std::make_shared<RequestWork>(
      detail::str(op, " (", dtype_name(tensor.dtype()), " ", shape_str(tensor.shape()), ", ",
                  is_send ? "to" : "from", " rank ", peer, ", tag ", tag, ") on ", g.describe()),
      detail::OpDescription(op, kP2PSeq, detail::OpSummary::of(tensor), group), std::move(request),
      handle);
  return Work(state);
}

}  // namespace

Work send(const Tensor& tensor, int dst, const Group& group, int tag) {
  return post("send", tensor, dst, group, tag, true);
}

Work recv(Tensor tensor, int src, const Group& group, int tag) {
  return post("recv", tensor, src, group, tag, false);
}

}  // namespace ferry
