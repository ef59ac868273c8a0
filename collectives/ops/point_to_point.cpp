// send and recv: posted straight to the transport from the calling thread. They match by
// (peer, tag) in posting order and do not take a collective sequence number, so they never
// disturb the order of collectives.
#include <ferry/collectives/engine/engine.h>
#include <ferry/runtime/config.h>

#include <mutex>
#include <vector>

namespace ferry {
namespace {

// A Work that is one transport request. Keep it until it completed: dropping it withdraws the
// message (as MPI requires MPI_Wait on every request).
class RequestWork final : public detail::WorkState {
 public:
  RequestWork(std::string description, std::unique_ptr<Request> request, Tensor tensor)
      : WorkState(std::move(description)), tensor_(std::move(tensor)), request_(std::move(request)) {}

  ~RequestWork() override {
    if (request_->test()) return;
    request_->cancel();
    if (request_->test()) return;
    // Not withdrawn (MPI cannot always cancel a send that has started): the transport may still
    // read or write the buffer, so it lives for the rest of the process.
    static std::mutex mu;
    static auto* kept = new std::vector<Tensor>();  // never freed, on purpose
    std::lock_guard<std::mutex> lock(mu);
    kept->push_back(tensor_);
  }

  bool is_completed() const override { return request_->test(); }

  bool wait_until(Clock::time_point deadline, bool /*may_help*/) override {
    std::lock_guard<std::mutex> lock(wait_mu_);
    if (finished_) return true;
    if (!request_->wait_until(deadline)) {
      request_->cancel();  // the buffer must not be written after we gave up on it
      return false;
    }
    finished_ = true;
    try {
      request_->rethrow_if_failed();
      if (!request_->is_send()) tensor_.bump_version();
      complete({tensor_});
    } catch (...) {
      fail(std::current_exception());
    }
    return true;
  }

 private:
  std::mutex wait_mu_;  // one waiter finishes the request
  bool finished_ = false;
  Tensor tensor_;  // declared before request_: destroyed after it, so that the request is
                   // withdrawn (and a copy in progress finished) while the buffer still lives
  std::unique_ptr<Request> request_;
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
      std::move(request), handle);
  state->on_wait_timeout = detail::poison_on_wait_timeout(group);
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
