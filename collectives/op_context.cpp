#include "collectives/op_context.h"

#include "runtime/error.h"

#include <chrono>

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
    if (!r->wait_until(deadline_)) fail_timeout();
  }
  // Everything finished; report the first failure (after which nothing is pending any more).
  for (auto& r : pending_) {
    try {
      r->rethrow_if_failed();
    } catch (...) {
      auto error = std::current_exception();
      for (auto& other : pending_) other->cancel();
      pending_.clear();
      rethrow_with_prefix(error, str(op_, " (seq ", seq_, ") on ", group_.describe(), ": "));
    }
  }
  pending_.clear();
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
    bool seen = false;
    for (int p : list) seen = seen || p == peer;
    if (!seen) list.push_back(peer);
  }
  for (auto& r : pending_) r->cancel();
  pending_.clear();
  auto ranks = [](const std::vector<int>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", rank " : "rank ") + std::to_string(v[i]);
    return s;
  };
  auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_);
  std::string msg = str(op_, " (seq ", seq_, ") on ", group_.describe(), " timed out after ",
                        waited.count(), " ms;");
  if (!silent.empty()) msg += str(" not heard from ", ranks(silent), ";");
  if (!not_taking.empty()) msg += str(" data not taken by ", ranks(not_taking), ";");
  msg += " the group is poisoned (did every rank issue this collective?)";
  FERRY_THROW(TimeoutError, msg);
}

}  // namespace ferry::detail
