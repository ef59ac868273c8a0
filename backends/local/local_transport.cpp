#include <ferry/backends/local/local_transport.h>

#include <ferry/runtime/error.h>
#include <ferry/runtime/idle_work.h>
#include <ferry/runtime/object_pool.h>
#include <ferry/runtime/small_vector.h>
#include <ferry/runtime/wait_policy.h>

#include <condition_variable>
#include <algorithm>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <tuple>

namespace ferry {
namespace detail {
namespace {

// Posted: queued in the receiving rank's mailbox. Matched (receives only): a send arrived for
// it; the receiver copies the next time it tests or waits. Copying: a thread is copying. Done.
// Posted -> * and Matched -> * happen under the receiving rank's mailbox lock.
enum class OpState : int { Posted, Matched, Copying, Done };

// One posted send or receive.
struct LocalOp {
  int owner = 0;  // rank that posted it
  int peer = 0;
  Tag tag;
  bool is_send = false;
  const void* send_data = nullptr;
  void* recv_data = nullptr;
  size_t bytes = 0;
  // isend_layout / irecv_layout: the bytes lie where `layout` says, not at send_data/recv_data.
  bool laid_out = false;
  ByteLayout layout;
  std::atomic<OpState> state{OpState::Posted};
  std::exception_ptr error;          // written before state becomes Done
  std::shared_ptr<LocalOp> partner;  // a Matched receive's send, until the copy is done

  // The layout's run list goes back to this thread's spares (byte_layout.h).
  ~LocalOp() { detail::give_byte_runs(std::move(layout.runs)); }

  int receiver() const { return is_send ? peer : owner; }
  int sender() const { return is_send ? owner : peer; }
};

using OpPtr = std::shared_ptr<LocalOp>;

}  // namespace

// The receiver copies: each rank pulls its own incoming data, so in a ring both ranks copy at
// the same time instead of whichever arrives second copying both directions.
class LocalWorld {
 public:
  explicit LocalWorld(int n)
      : boxes_(n), wakers_(n), dead_(n), dead_why_(n), ended_(n),
        ranks_have_cores_(n <= static_cast<int>(std::thread::hardware_concurrency())) {}

  int size() const { return static_cast<int>(boxes_.size()); }

  void post(const OpPtr& op) {
    Mailbox& box = boxes_[op->receiver()];
    OpPtr send;  // set when `op` is a receive that found its send: copy below
    {
      std::lock_guard<std::mutex> lock(box.mu);
      if (std::exception_ptr failure = failure_for(*op)) {
        finish(op, failure);
        return;
      }
      OpPtr match = take_match(op->is_send ? box.recvs : box.sends, *op);
      if (!match) {
        (op->is_send ? box.sends : box.recvs).push_back(op);
        return;
      }
      if (op->is_send) {
        // Leave the copy to the receiver, which is (or soon will be) waiting for it.
        match->partner = op;
        match->state.store(OpState::Matched);
        op->state.store(OpState::Matched);
        box.matched.push_back(match);
        box.matched_count.fetch_add(1, std::memory_order_release);
        wake(match->owner);
        return;
      }
      send = match;
      send->state.store(OpState::Copying);
      op->state.store(OpState::Copying);
    }
    copy_and_finish(op, send);
  }

  // Called by any thread of `rank` that tests or waits: copies every receive of the rank whose
  // send has arrived. Progressing all of them, not only the one waited for, keeps two ranks that
  // each wait on their own send first from waiting on each other.
  void progress(int rank) {
    Mailbox& box = boxes_[rank];
    if (box.matched_count.load(std::memory_order_acquire) == 0) return;
    SmallVector<std::pair<OpPtr, OpPtr>, 8> copies;  // (receive, send)
    {
      std::lock_guard<std::mutex> lock(box.mu);
      for (OpPtr& recv : box.matched) {
        recv->state.store(OpState::Copying);
        OpPtr send = std::move(recv->partner);
        send->state.store(OpState::Copying);  // so that a cancelling sender waits for the copy
        copies.emplace_back(std::move(recv), std::move(send));
      }
      box.matched.clear();
      box.matched_count.store(0);
    }
    for (auto& [recv, send] : copies) copy_and_finish(recv, send);
  }

  // Withdraws `op`; afterwards its buffer is never touched. A matched partner fails.
  void cancel(const OpPtr& op) {
    Mailbox& box = boxes_[op->receiver()];
    {
      std::lock_guard<std::mutex> lock(box.mu);
      if (erase(op->is_send ? box.sends : box.recvs, op) ||
          op->state.load() == OpState::Posted) {  // queued, or never got into a queue
        finish(op, withdrawn(*op, "cancelled"));
        return;
      }
      if (op->state.load() == OpState::Matched) {
        OpPtr recv = op->is_send ? find_matched_recv(box, op) : op;
        erase(box.matched, recv);
        box.matched_count.fetch_sub(1);
        OpPtr send = std::move(recv->partner);
        const char* why = op->is_send ? "the sender withdrew it" : "the receiver withdrew it";
        finish(send, withdrawn(*send, why));
        finish(recv, withdrawn(*recv, why));
        return;
      }
    }
    // Copying: another thread is copying this op's buffer; sleep until it is done.
    Waker& w = wakers_[op->owner];
    std::unique_lock<std::mutex> lock(w.mu);
    w.cv.wait(lock, [&] { return op->state.load() == OpState::Done; });
  }

  bool test(const OpPtr& op) {
    progress(op->owner);
    return op->state.load(std::memory_order_acquire) == OpState::Done;
  }

  bool wait_until(const OpPtr& op, Clock::time_point deadline) {
    // A waiter also wakes up when a send for any receive of its rank arrives, to copy it.
    std::atomic<int>& copies_due = boxes_[op->owner].matched_count;
    auto ready = [&] {
      return op->state.load(std::memory_order_acquire) == OpState::Done ||
             copies_due.load(std::memory_order_acquire) > 0;
    };
    const Clock::time_point first = Clock::now();
    for (;;) {
      if (test(op)) return true;
      if (spin_then_yield(ready)) continue;
      if (run_idle_work()) continue;  // this thread's own work, before sleeping (idle_work.h)
      // Where every rank can have a core of its own (2 ranks on 2 cores), keep testing for up
      // to kOwnCoreSpin before sleeping, as MPI's waits do: a peer a few hundred microseconds
      // late (one rank's share of a step ran longer) then costs no sleep and wake-up, and the
      // woken thread no trip through the scheduler. With more ranks than cores the spinner
      // would hold the core a peer needs, so those sleep after the short spin above. 2 local
      // ranks, DLRM step (ferry-dlrm --bench, alternating, 6 rounds): batch 512 4.92 -> 4.48 ms,
      // batch 128 2.11 -> 1.64 ms.
      if (ranks_have_cores_ && Clock::now() - first < kOwnCoreSpin) {
        for (int i = 0; i < 256 && !ready(); ++i) FERRY_CPU_RELAX();
        continue;
      }
      Waker& w = wakers_[op->owner];
      std::unique_lock<std::mutex> lock(w.mu);
      if (!w.cv.wait_until(lock, deadline, ready)) return false;
    }
  }

  void abandon_group(uint32_t group, int rank, const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(dead_mu_);
      abandoned_.emplace_back(group, rank, why);
      any_dead_.store(true);
    }
    sweep([&](const LocalOp& o) {
      return o.tag.group == group && (o.sender() == rank || o.receiver() == rank);
    }, [&] { return abandoned_failure(group, rank, why); });
  }

  bool ended(int rank) {
    std::lock_guard<std::mutex> lock(dead_mu_);
    return rank >= 0 && rank < static_cast<int>(ended_.size()) && ended_[rank];
  }

  // `why` completes "rank R of the local world ...": "failed: <error>" or "ended ..." (then
  // `ended`: the rank returned rather than failed).
  void declare_dead(int rank, const std::string& why, bool ended = false) {
    {
      std::lock_guard<std::mutex> lock(dead_mu_);
      if (dead_[rank]) return;
      dead_[rank] = true;
      ended_[rank] = ended;
      dead_why_[rank] = why;
      any_dead_.store(true);
    }
    sweep([&](const LocalOp& o) { return o.sender() == rank || o.receiver() == rank; },
          [&] { return peer_failure(rank); });
  }

 private:
  // How long a wait keeps testing before it sleeps when every rank can have a core of its own
  // (see wait_until).
  static constexpr auto kOwnCoreSpin = std::chrono::milliseconds(2);

  struct Mailbox {
    std::mutex mu;
    std::deque<OpPtr> sends;    // sends to this rank that no receive matched yet
    std::deque<OpPtr> recvs;    // receives this rank posted that no send matched yet
    std::deque<OpPtr> matched;  // receives of this rank whose send arrived, copy pending
    std::atomic<int> matched_count{0};  // matched.size(), readable without the lock
  };
  struct Waker {
    std::mutex mu;
    std::condition_variable cv;
  };

  // Fails every queued or matched op for which `hit` holds with the error `make_error` makes.
  template <class Hit, class MakeError>
  void sweep(Hit hit, MakeError make_error) {
    for (Mailbox& box : boxes_) {
      std::lock_guard<std::mutex> lock(box.mu);
      for (std::deque<OpPtr>* q : {&box.sends, &box.recvs}) {
        std::erase_if(*q, [&](const OpPtr& o) {
          if (!hit(*o)) return false;
          finish(o, make_error());
          return true;
        });
      }
      std::erase_if(box.matched, [&](const OpPtr& recv) {
        if (!hit(*recv)) return false;
        box.matched_count.fetch_sub(1);
        OpPtr send = std::move(recv->partner);
        finish(send, make_error());
        finish(recv, make_error());
        return true;
      });
    }
  }

  // The oldest op of `q` from the same sender with the same tag (MPI's matching order).
  static OpPtr take_match(std::deque<OpPtr>& q, const LocalOp& op) {
    for (auto it = q.begin(); it != q.end(); ++it) {
      if ((*it)->sender() == op.sender() && (*it)->tag == op.tag) {
        OpPtr match = *it;
        q.erase(it);
        return match;
      }
    }
    return nullptr;
  }

  static bool erase(std::deque<OpPtr>& q, const OpPtr& op) {
    auto it = std::find(q.begin(), q.end(), op);
    if (it == q.end()) return false;
    q.erase(it);
    return true;
  }

  static OpPtr find_matched_recv(Mailbox& box, const OpPtr& send) {
    for (const OpPtr& r : box.matched)
      if (r->partner == send) return r;
    return nullptr;  // unreachable: a Matched send's receive is in its receiver's list
  }

  void copy_and_finish(const OpPtr& recv, const OpPtr& send) {
    if (send->bytes != recv->bytes) {
      // One exception object per side: the two ranks' threads rethrow and destroy them apart.
      auto mismatch = [&] {
        return std::make_exception_ptr(MismatchError(str(
            "ferry: rank ", send->owner, " sent ", send->bytes, " bytes to rank ", recv->owner,
            " for ", tag_str(send->tag), " but rank ", recv->owner, " expected ", recv->bytes,
            " bytes: the ranks called the collective with different sizes")));
      };
      finish(send, mismatch());
      finish(recv, mismatch());
      return;
    }
    if (send->bytes > 0) {
      // A side of plain bytes is packed into or unpacked from as it is: describing it as a
      // layout of one run cost a list per copy.
      if (send->laid_out && recv->laid_out) {
        copy_layout(send->layout, recv->layout);
      } else if (send->laid_out) {
        pack_layout(send->layout, static_cast<char*>(recv->recv_data));
      } else if (recv->laid_out) {
        unpack_layout(static_cast<const char*>(send->send_data), recv->layout);
      } else {
        std::memcpy(recv->recv_data, send->send_data, send->bytes);
      }
    }
    finish(send, nullptr);
    finish(recv, nullptr);
  }

  // The error an op must fail with at once: one side is dead, or abandoned the op's group.
  std::exception_ptr failure_for(const LocalOp& op) {
    if (!any_dead_.load()) return nullptr;
    std::lock_guard<std::mutex> lock(dead_mu_);
    for (int r : {op.sender(), op.receiver()}) {
      if (dead_[r]) return peer_failure_locked(r);
      for (const auto& [group, rank, why] : abandoned_)
        if (group == op.tag.group && rank == r) return abandoned_failure(group, rank, why);
    }
    return nullptr;
  }

  std::exception_ptr peer_failure(int rank) {
    std::lock_guard<std::mutex> lock(dead_mu_);
    return peer_failure_locked(rank);
  }

  std::exception_ptr peer_failure_locked(int rank) {
    return std::make_exception_ptr(
        PeerFailure(str("ferry: rank ", rank, " of the local world ", dead_why_[rank])));
  }

  static std::exception_ptr abandoned_failure(uint32_t group, int rank, const std::string& why) {
    return std::make_exception_ptr(PeerFailure(str("ferry: world rank ", rank,
                                                   " gave up on group ", group, " after: ", why)));
  }

  static std::exception_ptr withdrawn(const LocalOp& op, const char* why) {
    return std::make_exception_ptr(TransportError(str(
        "ferry: ", op.is_send ? "send to rank " : "receive from rank ", op.peer, " for ",
        tag_str(op.tag), " withdrawn: ", why)));
  }

  void wake(int rank) {
    Waker& w = wakers_[rank];
    std::lock_guard<std::mutex> lock(w.mu);  // pairs with the waiter's predicate check
    w.cv.notify_all();
  }

  void finish(const OpPtr& op, std::exception_ptr error) {
    op->error = std::move(error);
    op->state.store(OpState::Done, std::memory_order_release);
    wake(op->owner);
  }

  std::vector<Mailbox> boxes_;
  std::vector<Waker> wakers_;
  std::mutex dead_mu_;
  std::vector<bool> dead_;
  std::vector<std::string> dead_why_;
  std::vector<bool> ended_;  // dead because its function returned, not because it failed
  std::vector<std::tuple<uint32_t, int, std::string>> abandoned_;  // (group, world rank, why)
  std::atomic<bool> any_dead_{false};  // anything in dead_ or abandoned_: check before posting
  const bool ranks_have_cores_;  // the world's ranks (threads) are no more than the cores
};

namespace {

// From the object pool (object_pool.h), as its op is: a message costs no allocation in the
// steady state.
class LocalRequest final : public Request, public Pooled {
 public:
  LocalRequest(std::shared_ptr<LocalWorld> world, OpPtr op)
      : Request(op->peer, op->is_send), world_(std::move(world)), op_(std::move(op)) {}
  ~LocalRequest() override { cancel(); }

  bool test() override { return world_->test(op_); }
  bool wait_until(Clock::time_point deadline) override {
    return world_->wait_until(op_, deadline);
  }
  void cancel() override {
    if (op_->state.load() != OpState::Done) world_->cancel(op_);
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
  // Layouts cost nothing here: the receiving thread copies from one placement to the other.
  std::unique_ptr<Request> isend_layout(int dst, const Tag& tag, ByteLayout layout) override {
    return post(dst, tag, true, nullptr, layout.bytes(), &layout);
  }
  std::unique_ptr<Request> irecv_layout(int src, const Tag& tag, ByteLayout layout) override {
    return post(src, tag, false, nullptr, layout.bytes(), &layout);
  }

  void abandon_group(uint32_t group, const std::string& why) override {
    world_->abandon_group(group, rank_, why);
  }

  bool peer_ended(int peer) const override { return world_->ended(peer); }

  LocalWorld& world() { return *world_; }

 private:
  std::unique_ptr<Request> post(int peer, const Tag& tag, bool is_send, void* data,
                                size_t bytes, ByteLayout* layout = nullptr) {
    FERRY_CHECK(peer >= 0 && peer < size(), InvalidArgument, "local transport ",
                is_send ? "isend" : "irecv", " on rank ", rank_, ": peer must be in [0, ",
                size(), "), given ", peer);
    auto op = std::allocate_shared<LocalOp>(PoolAllocator<LocalOp>());
    op->owner = rank_;
    op->peer = peer;
    op->tag = tag;
    op->is_send = is_send;
    op->send_data = is_send ? data : nullptr;
    op->recv_data = is_send ? nullptr : data;
    op->bytes = bytes;
    if (layout) {
      op->laid_out = true;
      op->layout = std::move(*layout);
    }
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
  local->world().declare_dead(rank, "failed: " + why);
}

void end_local_rank(Transport& any_rank_of_world, int rank, const std::string& how) {
  auto* local = dynamic_cast<detail::LocalTransport*>(&any_rank_of_world);
  FERRY_CHECK(local != nullptr, InvalidArgument,
              "end_local_rank: expected a local transport, given ", any_rank_of_world.name());
  FERRY_CHECK(rank >= 0 && rank < local->size(), InvalidArgument,
              "end_local_rank: rank must be in [0, ", local->size(), "), given ", rank);
  local->world().declare_dead(
      rank, detail::str("ended (", how, ") before it took part: it sends and receives nothing "
                        "more"), /*ended=*/true);
}

}  // namespace ferry
