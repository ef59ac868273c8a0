#include "backends/local/local_transport.h"

#include "runtime/wait_policy.h"
#include "runtime/error.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>

namespace ferry {
namespace detail {
namespace {

enum class OpState : int { Posted, Copying, Done };

// One posted send or receive. `state` moves Posted -> Copying -> Done (or Posted -> Done on
// cancel or failure); only the Posted -> * transitions happen under the destination mailbox lock.
struct LocalOp {
  int owner = 0;  // rank that posted it
  int peer = 0;
  Tag tag;
  bool is_send = false;
  const void* send_data = nullptr;
  void* recv_data = nullptr;
  size_t bytes = 0;
  std::atomic<OpState> state{OpState::Posted};
  std::exception_ptr error;  // written before state becomes Done
};

using OpPtr = std::shared_ptr<LocalOp>;

}  // namespace

class LocalWorld {
 public:
  explicit LocalWorld(int n) : boxes_(n), wakers_(n), dead_(n) {}

  int size() const { return static_cast<int>(boxes_.size()); }

  // Posts `op` into the mailbox of the receiving rank; completes at once when it matches.
  void post(const OpPtr& op) {
    int dst = op->is_send ? op->peer : op->owner;
    int src = op->is_send ? op->owner : op->peer;
    Mailbox& box = boxes_[dst];
    OpPtr match;
    {
      std::lock_guard<std::mutex> lock(box.mu);
      if (int dead = first_dead(src, dst); dead >= 0) {
        finish(op, peer_failure(dead));
        return;
      }
      std::deque<OpPtr>& others = op->is_send ? box.recvs : box.sends;
      for (auto it = others.begin(); it != others.end(); ++it) {
        LocalOp& o = **it;
        int o_src = o.is_send ? o.owner : o.peer;
        if (o_src == src && o.tag == op->tag) {
          match = *it;
          others.erase(it);
          match->state.store(OpState::Copying);
          op->state.store(OpState::Copying);
          break;
        }
      }
      if (!match) {
        (op->is_send ? box.sends : box.recvs).push_back(op);
        return;
      }
    }
    // Copy outside the lock so other pairs of this mailbox are not held up by a large payload.
    const OpPtr& send = op->is_send ? op : match;
    const OpPtr& recv = op->is_send ? match : op;
    std::exception_ptr error;
    if (send->bytes != recv->bytes) {
      error = std::make_exception_ptr(MismatchError(str(
          "ferry: rank ", send->owner, " sent ", send->bytes, " bytes to rank ", recv->owner,
          " for ", tag_str(send->tag), " but rank ", recv->owner, " expected ", recv->bytes,
          " bytes: the ranks called the collective with different sizes")));
    } else if (send->bytes > 0) {
      std::memcpy(recv->recv_data, send->send_data, send->bytes);
    }
    finish(send, error);
    finish(recv, error);
  }

  // Withdraws `op` if still queued; otherwise waits until a copy in progress is over.
  void cancel(const OpPtr& op) {
    int dst = op->is_send ? op->peer : op->owner;
    Mailbox& box = boxes_[dst];
    {
      std::lock_guard<std::mutex> lock(box.mu);
      if (remove_locked(box, op)) {
        finish(op, std::make_exception_ptr(TransportError(
                                   str("ferry: request for ", tag_str(op->tag), " cancelled"))));
        return;
      }
    }
    while (op->state.load() != OpState::Done) std::this_thread::yield();  // a copy is finishing
  }

  bool wait_until(const OpPtr& op, Clock::time_point deadline) {
    auto done = [&] { return op->state.load(std::memory_order_acquire) == OpState::Done; };
    if (spin_then_yield(done)) return true;
    Waker& w = wakers_[op->owner];
    std::unique_lock<std::mutex> lock(w.mu);
    return w.cv.wait_until(lock, deadline, done);
  }

  void declare_dead(int rank, const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(dead_mu_);
      if (dead_[rank]) return;
      dead_[rank] = true;
      dead_why_ = why;
      any_dead_.store(true);
    }
    for (int dst = 0; dst < size(); ++dst) {
      Mailbox& box = boxes_[dst];
      std::lock_guard<std::mutex> lock(box.mu);
      for (std::deque<OpPtr>* q : {&box.sends, &box.recvs}) {
        for (auto it = q->begin(); it != q->end();) {
          int src = (*it)->is_send ? (*it)->owner : (*it)->peer;
          if (src == rank || dst == rank) {
            finish(*it, peer_failure(rank));
            it = q->erase(it);
          } else {
            ++it;
          }
        }
      }
    }
  }

 private:
  struct Mailbox {
    std::mutex mu;
    std::deque<OpPtr> sends;  // sends to this rank that no receive matched yet
    std::deque<OpPtr> recvs;  // receives this rank posted that no send matched yet
  };
  struct Waker {
    std::mutex mu;
    std::condition_variable cv;
  };

  int first_dead(int a, int b) {
    if (!any_dead_.load()) return -1;
    std::lock_guard<std::mutex> lock(dead_mu_);
    if (dead_[a]) return a;
    if (dead_[b]) return b;
    return -1;
  }

  std::exception_ptr peer_failure(int rank) {
    std::lock_guard<std::mutex> lock(dead_mu_);
    return std::make_exception_ptr(
        PeerFailure(str("ferry: rank ", rank, " of the local world failed: ", dead_why_)));
  }

  static bool remove_locked(Mailbox& box, const OpPtr& op) {
    std::deque<OpPtr>& q = op->is_send ? box.sends : box.recvs;
    for (auto it = q.begin(); it != q.end(); ++it) {
      if (*it == op) {
        q.erase(it);
        return true;
      }
    }
    return false;
  }


  void finish(const OpPtr& op, std::exception_ptr error) {
    op->error = std::move(error);
    op->state.store(OpState::Done, std::memory_order_release);
    Waker& w = wakers_[op->owner];
    std::lock_guard<std::mutex> lock(w.mu);  // pairs with the waiter's predicate check
    w.cv.notify_all();
  }

  std::vector<Mailbox> boxes_;
  std::vector<Waker> wakers_;
  std::mutex dead_mu_;
  std::vector<bool> dead_;
  std::string dead_why_;
  std::atomic<bool> any_dead_{false};
};

namespace {

class LocalRequest final : public Request {
 public:
  LocalRequest(std::shared_ptr<LocalWorld> world, OpPtr op)
      : Request(op->peer, op->is_send), world_(std::move(world)), op_(std::move(op)) {}
  ~LocalRequest() override { cancel(); }

  bool test() override { return op_->state.load(std::memory_order_acquire) == OpState::Done; }
  bool wait_until(Clock::time_point deadline) override {
    return world_->wait_until(op_, deadline);
  }
  void cancel() override {
    if (!test()) world_->cancel(op_);
  }
  void rethrow_if_failed() override {
    if (op_->error) std::rethrow_exception(op_->error);
  }

 private:
  std::shared_ptr<LocalWorld> world_;
  OpPtr op_;
};

class LocalTransport final : public Transport {
 public:
  LocalTransport(std::shared_ptr<LocalWorld> world, int rank)
      : world_(std::move(world)), rank_(rank) {}

  std::string name() const override { return "local"; }
  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }

  std::unique_ptr<Request> isend(int dst, const Tag& tag, const void* data,
                                 size_t bytes) override {
    return post(dst, tag, true, const_cast<void*>(data), bytes);
  }
  std::unique_ptr<Request> irecv(int src, const Tag& tag, void* data, size_t bytes) override {
    return post(src, tag, false, data, bytes);
  }

  LocalWorld& world() { return *world_; }

 private:
  std::unique_ptr<Request> post(int peer, const Tag& tag, bool is_send, void* data,
                                size_t bytes) {
    FERRY_CHECK(peer >= 0 && peer < size(), InvalidArgument, "local transport ",
                is_send ? "isend" : "irecv", " on rank ", rank_, ": peer must be in [0, ",
                size(), "), given ", peer);
    auto op = std::make_shared<LocalOp>();
    op->owner = rank_;
    op->peer = peer;
    op->tag = tag;
    op->is_send = is_send;
    op->send_data = is_send ? data : nullptr;
    op->recv_data = is_send ? nullptr : data;
    op->bytes = bytes;
    auto request = std::make_unique<LocalRequest>(world_, op);
    world_->post(op);
    return request;
  }

  std::shared_ptr<LocalWorld> world_;
  int rank_;
};

}  // namespace
}  // namespace detail

std::vector<std::shared_ptr<Transport>> make_local_world(int n) {
  FERRY_CHECK(n >= 1, InvalidArgument, "make_local_world: expected at least 1 rank, given ", n);
  auto world = std::make_shared<detail::LocalWorld>(n);
  std::vector<std::shared_ptr<Transport>> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(std::make_shared<detail::LocalTransport>(world, r));
  return ranks;
}

void fail_local_rank(Transport& any_rank_of_world, int rank, const std::string& why) {
  auto* local = dynamic_cast<detail::LocalTransport*>(&any_rank_of_world);
  FERRY_CHECK(local != nullptr, InvalidArgument, "fail_local_rank: expected a local transport, given ",
              any_rank_of_world.name());
  FERRY_CHECK(rank >= 0 && rank < local->size(), InvalidArgument,
              "fail_local_rank: rank must be in [0, ", local->size(), "), given ", rank);
  local->world().declare_dead(rank, why);
}

}  // namespace ferry
