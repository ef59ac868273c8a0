#include <ferry/collectives/engine/op_context.h>

#include <ferry/runtime/error.h>

#include <algorithm>
#include <chrono>
#include <mutex>

namespace ferry::detail {

OpContext::OpContext(GroupImpl& group, std::string op, uint64_t seq, Clock::time_point deadline)
    : group_(group), op_(std::move(op)), seq_(seq), start_(Clock::now()), deadline_(deadline) {}

OpContext::~OpContext() {
  for (auto& r : pending_) r->cancel();
}

Tag OpContext::tag(uint32_t step) const {
  // 8 bits of phase, 24 of step: steps count at most a few times the group size.
  return Tag{group_.id(), (phase_ << 24) | (step & 0xFFFFFF), seq_};
}

void OpContext::send(int peer, uint32_t step, const void* data, size_t bytes) {
  pending_.push_back(group_.transport().isend(group_.members()[peer], tag(step), data, bytes));
}

void OpContext::recv(int peer, uint32_t step, void* data, size_t bytes) {
  pending_.push_back(group_.transport().irecv(group_.members()[peer], tag(step), data, bytes));
}

void OpContext::wait_all() {
  for (auto& r : pending_) {
    // In slices: between them, stop if the group was poisoned meanwhile (a user's Work::wait
    // gave up) or if another request of the op already failed (a peer died), instead of
    // holding the worker until the deadline.
    while (!r->wait_until(std::min(deadline_, Clock::now() + kCheckEvery))) {
      if (Clock::now() >= deadline_) fail_timeout();
      if (group_.poisoned()) abort_poisoned();
      rethrow_first_failure();
    }
  }
  rethrow_first_failure();
  pending_.clear();
}

bool OpContext::test_all() {
  for (auto& r : pending_) {
    if (r->test()) continue;
    rethrow_first_failure();
    return false;
  }
  rethrow_first_failure();
  pending_.clear();
  return true;
}

void OpContext::wait_native(std::unique_ptr<NativeRequest> request, std::vector<Tensor> keep) {
  // In slices, as wait_all: a poisoned group stops the wait before the deadline.
  while (!request->wait_until(std::min(deadline_, Clock::now() + kCheckEvery))) {
    const bool expired = Clock::now() >= deadline_;
    if (!expired && !group_.poisoned()) continue;
    const auto waited =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_);
    const std::string transport = native()->name();
    abandon_native(std::move(request), std::move(keep));
    const std::string never = str(" ", transport, " cannot cancel a collective, so the group's ",
                                  transport, " communicator can never be used again and the job "
                                  "must end (exit, or MPI_Abort)");
    if (!expired) {
      group_.throw_if_poisoned(str(op_, " (seq ", seq_, ") abandoned;", never, ";"));
    }
    std::vector<int> absent = ranks_not_here();
    std::string msg = str(op_, " (seq ", seq_, ") on ", group_.describe(), " timed out after ",
                          waited.count(), " ms;");
    if (!absent.empty()) {
      msg += absent.size() == 1 ? " rank " : " ranks ";
      for (size_t i = 0; i < absent.size(); ++i) msg += str(i ? ", " : "", absent[i]);
      msg += " did not reach this collective;";
    }
    msg += str(" the group is poisoned;", never,
               " (every rank must issue the same collectives in the same order)");
    FERRY_THROW(OwnDeadlineExpired, msg);
  }
  try {
    request->rethrow_if_failed();
  } catch (...) {
    rethrow_with_prefix(std::current_exception(),
                        str(op_, " (seq ", seq_, ") on ", group_.describe(), ": "));
  }
}

void OpContext::abandon_native(std::unique_ptr<NativeRequest> request, std::vector<Tensor> keep) {
  // The transport may still write into these buffers whenever the absent peers arrive: they
  // live as long as the process (which must end anyway).
  static std::mutex mu;
  static auto* kept = new std::vector<std::vector<Tensor>>();
  {
    std::lock_guard<std::mutex> lock(mu);
    kept->push_back(std::move(keep));
  }
  if (leak_scratch_on_abandon_) group_.scratch().leak();
  native()->abandon_stuck_request(std::move(request));
}

void OpContext::rethrow_first_failure() {
  for (auto& r : pending_) {
    if (!r->test()) continue;
    try {
      r->rethrow_if_failed();
    } catch (...) {
      auto error = std::current_exception();
      for (auto& other : pending_) other->cancel();
      pending_.clear();
      rethrow_with_prefix(error, str(op_, " (seq ", seq_, ") on ", group_.describe(), ": "));
    }
  }
}

std::vector<int> OpContext::ranks_not_here() {
  // Every rank stuck in this op times out at about the same moment (same deadline, counted from
  // a start that was in step), so each tells every peer which op it is stuck in and listens for
  // a short while. A rank that never reached the op is elsewhere and stays silent, or answers
  // from another op: those are the culprits, named on every rank, not only on its neighbours.
  // It costs nothing until a timeout. It can reach each rank once per group: the timeout
  // poisons the group, and ops on a poisoned group fail before they get here.
  const int n = size(), me = rank();
  const Tag tag{group_.id(), 0, kDiagnosisSeq};
  const auto window = std::clamp<Clock::duration>((deadline_ - start_) / 4,
                                                  std::chrono::milliseconds(50),
                                                  std::chrono::seconds(2));
  std::vector<uint64_t> theirs(n, 0);
  std::vector<std::unique_ptr<Request>> requests;
  std::vector<int> peer_of;
  for (int k = 0; k < n; ++k) {
    if (k == me) continue;
    requests.push_back(group_.transport().irecv(group_.members()[k], tag, &theirs[k], 8));
    peer_of.push_back(k);
  }
  for (int k = 0; k < n; ++k) {
    if (k == me) continue;
    requests.push_back(group_.transport().isend(group_.members()[k], tag, &seq_, 8));
  }
  const auto until = Clock::now() + window;
  std::vector<int> absent;
  for (size_t i = 0; i < peer_of.size(); ++i) {
    bool ok = requests[i]->wait_until(until);
    if (ok) {
      try {
        requests[i]->rethrow_if_failed();
      } catch (const std::exception&) {
        ok = false;
      }
    }
    if (!ok || theirs[peer_of[i]] != seq_) absent.push_back(peer_of[i]);
  }
  for (auto& r : requests) r->cancel();  // our sends and `theirs` must not be touched later
  return absent;
}

void OpContext::abort_poisoned() {
  for (auto& r : pending_) r->cancel();
  pending_.clear();
  group_.throw_if_poisoned(str(op_, " (seq ", seq_, ")"));
  FERRY_THROW(Error, "abort_poisoned on a group that is not poisoned (internal error)");
}

void OpContext::fail_timeout() {
  // Which group ranks we still wait on: a receive means we have not heard from the peer; a send
  // means the peer has not come to take our data.
  auto group_rank_of = [&](int world) {
    for (int r = 0; r < group_.size(); ++r)
      if (group_.members()[r] == world) return r;
    return -1;
  };
  std::vector<int> silent, not_taking;
  for (auto& r : pending_) {
    if (r->test()) continue;
    std::vector<int>& list = r->is_send() ? not_taking : silent;
    int peer = group_rank_of(r->peer());
    if (std::find(list.begin(), list.end(), peer) == list.end()) list.push_back(peer);
  }
  for (auto& r : pending_) r->cancel();
  pending_.clear();
  auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_);
  std::vector<int> absent = ranks_not_here();
  auto ranks = [](const std::vector<int>& v) {
    std::string s = v.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s;
  };
  std::string msg = str(op_, " (seq ", seq_, ") on ", group_.describe(), " timed out after ",
                        waited.count(), " ms;");
  if (!absent.empty()) msg += str(" ", ranks(absent), " did not reach this collective;");
  if (!silent.empty()) msg += str(" waiting for data from ", ranks(silent), ";");
  if (!not_taking.empty()) msg += str(" waiting for ", ranks(not_taking), " to take our data;");
  msg += " the group is poisoned (every rank must issue the same collectives in the same order)";
  FERRY_THROW(OwnDeadlineExpired, msg);
}

}  // namespace ferry::detail
