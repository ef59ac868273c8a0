#include <ferry/collectives/engine/op_context.h>

#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>
#include <ferry/runtime/timeline.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <mutex>

namespace ferry::detail {

std::exception_ptr public_error(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const OwnDeadlineExpired& e) {
    return std::make_exception_ptr(TimeoutError(e.what(), e.where()));
  } catch (...) {
    return error;
  }
}

OpContext::OpContext(GroupImpl& group, const char* op, uint64_t seq, Clock::time_point deadline)
    : group_(group), op_(op), seq_(seq), start_(Clock::now()), deadline_(deadline),
      fingerprint_(Fingerprint::of(op, seq, group.id(), OpSummary{})) {
  fingerprint_.complete = 0;  // only the op's name and seq are known until set_fingerprint
  set_times();
}

OpContext::OpContext(GroupImpl& group, const char* op, const Fingerprint& f,
                     Clock::time_point start, Clock::time_point deadline)
    : group_(group), op_(op), seq_(f.seq), start_(start), deadline_(deadline),
      check_(check_hash(f)), fingerprint_(f) {
  set_times();
}

void OpContext::set_times() {
  // The diagnosis after a timeout listens for the peers for a while: it takes that while out
  // of the op's own deadline, so the op fails at its deadline rather than after it.
  diagnosis_window_ = std::clamp<Clock::duration>((deadline_ - start_) / 4,
                                                  std::chrono::milliseconds(50),
                                                  std::chrono::seconds(2));
  give_up_ = std::max(start_ + (deadline_ - start_) / 2, deadline_ - diagnosis_window_);
  const auto stall = stall_warning_after(
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - start_));
  // A warning due at or after the give-up time would only repeat the TimeoutError.
  stall_at_ = stall.count() > 0 && start_ + stall < give_up_ ? start_ + stall
                                                              : Clock::time_point::max();
  if (timeline_on()) wall_start_ = std::chrono::system_clock::now();
}

void OpContext::set_fingerprint(const Fingerprint& f) {
  fingerprint_ = f;
  check_ = check_hash(f);
}

OpContext::~OpContext() {
  withdraw();
  if (timeline_on()) {
    // An op that ends by an exception (timeout, peer failure) is marked, so the trace shows
    // where a job stopped.
    const bool failed = std::uncaught_exceptions() > 0;
    timeline_event(op_, group_.members()[static_cast<size_t>(group_.rank())], group_.id(),
                   wall_start_, std::chrono::system_clock::now(),
                   str("\"seq\": ", seq_, ", \"group_rank\": ", group_.rank(),
                       ", \"group_size\": ", group_.size(), failed ? ", \"failed\": true" : ""));
  }
}

Tag OpContext::tag(uint32_t step) const {
  // 8 bits of phase, 24 of step: steps count at most a few times the group size.
  step += view_.first_step;
  return Tag{group_.id(), (phase_ << 24) | (step & 0xFFFFFF), seq_, check_};
}

void OpContext::send(int peer, uint32_t step, const void* data, size_t bytes) {
  pending_.push_back(group_.transport().isend(member(peer), tag(step), data, bytes));
}

void OpContext::recv(int peer, uint32_t step, void* data, size_t bytes) {
  pending_.push_back(group_.transport().irecv(member(peer), tag(step), data, bytes));
}

void OpContext::send(int peer, uint32_t step, ByteLayout layout) {
  pending_.push_back(
      group_.transport().isend_layout(member(peer), tag(step), std::move(layout)));
}

void OpContext::recv(int peer, uint32_t step, ByteLayout layout) {
  pending_.push_back(
      group_.transport().irecv_layout(member(peer), tag(step), std::move(layout)));
}

void OpContext::wait_all() {
  for (auto& r : pending_) {
    // In slices: between them, stop if the group was poisoned meanwhile (a user's Work::wait
    // gave up) or if another request of the op already failed (a peer died), instead of
    // holding the worker until the deadline.
    while (!r->wait_until(std::min(give_up_, Clock::now() + kCheckEvery))) {
      if (Clock::now() >= give_up_) fail_timeout();
      warn_if_stalled(/*native_call=*/false);
      if (group_.poisoned()) abort_poisoned();
      rethrow_first_failure();
      if (const std::string gone = departed_peer(); !gone.empty()) {
        withdraw();
        FERRY_THROW(PeerFailure, op_, " (seq ", seq_, ") on ", group_.describe(), ": ", gone);
      }
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
  while (!request->wait_until(std::min(give_up_, Clock::now() + kCheckEvery))) {
    const bool expired = Clock::now() >= give_up_;
    const std::string gone = expired ? std::string() : departed_peer();
    if (!gone.empty()) {
      abandon_native(std::move(request), std::move(keep));
      FERRY_THROW(PeerFailure, op_, " (seq ", seq_, ") on ", group_.describe(), ": ", gone,
                  "; ", native()->name(), " cannot cancel a collective, so the group's ",
                  native()->name(), " communicator can never be used again");
    }
    if (!expired && !group_.poisoned()) {
      warn_if_stalled(/*native_call=*/true);
      continue;
    }
    const std::string transport = native()->name();
    abandon_native(std::move(request), std::move(keep));
    const std::string never = str(" ", transport, " cannot cancel a collective, so the group's ",
                                  transport, " communicator can never be used again and the job "
                                  "must end (exit, or MPI_Abort)");
    if (!expired) {
      group_.throw_if_poisoned(str(op_, " (seq ", seq_, ") abandoned;", never, ";"));
    }
    const std::string tail = str(" the group is poisoned;", never,
                                 " (every rank must issue the same collectives in the same order)");
    const std::string found = explain(diagnose(), tail);
    FERRY_THROW(OwnDeadlineExpired, op_, " (seq ", seq_, ") on ", group_.describe(),
                " timed out after ", deadline_text(), ";", found, tail);
  }
  try {
    request->rethrow_if_failed();
  } catch (...) {
    // A transport may fail an op it had to abandon (MPI's key check found the ranks' calls
    // differ while the op was in flight): MPI may still write into its buffers.
    keep_for_life(std::move(keep));
    rethrow_with_prefix(std::current_exception(),
                        str(op_, " (seq ", seq_, ") on ", group_.describe(), ": "));
  }
}

void OpContext::withdraw() {
  if (pending_.empty()) return;
  // Together, so that the transports' graces for transfers under way overlap, and not past the
  // op's deadline: an op that times out must fail at its deadline, with every receive withdrawn
  // by then (a transfer a live peer left half done is cut off rather than waited for).
  if (cancel_all(pending_, deadline_)) {
    pending_.clear();
    return;
  }
  // A receive the transport could not withdraw may still be written into whenever its peer
  // goes on, and a send (MPI cannot cancel one) may still be read from, so sent to the peer
  // with whatever the memory then holds: that memory must never be freed or reused. The
  // group's scratch and what the op held are kept here; the caller's tensors by whoever holds
  // them (buffers_kept).
  bool send = false, receive = false;
  for (auto& r : pending_) {
    if (r->let_go()) continue;
    (r->is_send() ? send : receive) = true;
  }
  pending_.clear();
  if (!held_.empty()) {
    keep_until_exit(std::make_shared<std::vector<std::shared_ptr<const void>>>(held_.begin(),
                                                                              held_.end()));
    held_.clear();
  }
  if (buffers_kept_) return;
  buffers_kept_ = true;
  if (leak_scratch_on_abandon_) group_.scratch().leak();
  const char* what = send && receive ? "a send and a receive" : send ? "a send" : "a receive";
  log_line(LogLevel::Warn, "coll",
           str(op_, " (seq ", seq_, ") on ", group_.describe(), ": ", what,
               " could not be withdrawn (the transport may still ",
               send && receive ? "read and write" : send ? "read" : "write",
               " its memory); the op's buffers are kept for the rest of the process"));
}

void keep_until_exit(std::shared_ptr<const void> keep) {
  static std::mutex mu;
  static auto* kept = new std::vector<std::shared_ptr<const void>>();  // never destroyed
  std::lock_guard<std::mutex> lock(mu);
  kept->push_back(std::move(keep));
}

void OpContext::keep_for_life(std::vector<Tensor> keep) {
  keep_until_exit(std::make_shared<std::vector<Tensor>>(std::move(keep)));
}

void OpContext::abandon_native(std::unique_ptr<NativeRequest> request, std::vector<Tensor> keep) {
  // The transport may still write into these buffers whenever the absent peers arrive: they
  // live as long as the process (which must end anyway).
  keep_for_life(std::move(keep));
  if (leak_scratch_on_abandon_) group_.scratch().leak();
  native()->abandon_stuck_request(std::move(request));
}

std::string OpContext::deadline_text() const {
  // The whole deadline, which is when the error comes: the last part of it (up to 2 s) went to
  // asking the peers what they are in, so the time spent waiting for data alone is shorter.
  const auto limit = std::chrono::round<std::chrono::milliseconds>(deadline_ - start_);
  return str("its ", limit.count(), " ms deadline");
}

std::string OpContext::departed_peer() const {
  const std::shared_ptr<CloseWatch> watch = close_watch();
  if (!watch) return "";
  const std::vector<int>& members = group_.members();
  for (size_t i = 0; i < members.size(); ++i) {
    if (static_cast<int>(i) == group_.rank()) continue;
    std::string why = watch->departed_before(group_.id(), members[i], seq_);
    if (!why.empty()) {
      group_.note_member_ended(members[i]);
      return why;
    }
  }
  return "";
}

void OpContext::rethrow_first_failure() {
  for (auto& r : pending_) {
    if (!r->test()) continue;
    try {
      r->rethrow_if_failed();
    } catch (const PeerFailure&) {
      // A peer that ended without failing (a local rank whose function returned) issued fewer
      // collectives than this op's seq: the group notes it for the progress check.
      if (group_.transport().peer_ended(r->peer())) group_.note_member_ended(r->peer());
      auto error = std::current_exception();
      withdraw();
      rethrow_with_prefix(error, str(op_, " (seq ", seq_, ") on ", group_.describe(), ": "));
    } catch (...) {
      auto error = std::current_exception();
      withdraw();
      rethrow_with_prefix(error, str(op_, " (seq ", seq_, ") on ", group_.describe(), ": "));
    }
  }
}

OpContext::Diagnosis OpContext::diagnose(const std::function<void()>& meanwhile) {
  // Every rank stuck in this op times out at about the same moment (same deadline, counted from
  // a start that was in step), so each tells every peer the fingerprint of the op it is stuck in
  // and listens for a short while. A rank that never reached the op is elsewhere and stays
  // silent, or answers from another op; so does a rank that finished it (a mismatched call can
  // let some ranks through): a silent rank is therefore never said to be absent, only silent.
  // It costs nothing until a timeout. It can reach each rank once per group: the timeout
  // poisons the group, and ops on a poisoned group fail before they get here.
  const int n = group_.size(), me = group_.rank();
  const Tag tag{group_.id(), 0, kDiagnosisSeq, 0};
  const auto window = diagnosis_window_;
  std::vector<Fingerprint> theirs(static_cast<size_t>(n));
  std::vector<std::unique_ptr<Request>> requests;
  std::vector<int> peer_of;
  for (int k = 0; k < n; ++k) {
    if (k == me) continue;
    requests.push_back(group_.transport().irecv(group_.members()[k], tag, &theirs[k],
                                                sizeof(Fingerprint)));
    peer_of.push_back(k);
  }
  // Sent from our own slot of `theirs`, which is kept with it should a send not be withdrawn
  // (the context, and its fingerprint_, may be on a stack that is about to unwind).
  theirs[static_cast<size_t>(me)] = fingerprint_;
  for (int k = 0; k < n; ++k) {
    if (k == me) continue;
    requests.push_back(group_.transport().isend(group_.members()[k], tag,
                                                &theirs[static_cast<size_t>(me)],
                                                sizeof(Fingerprint)));
  }
  const auto until = Clock::now() + window;
  // Our messages are out at the same moment as our peers' (the deadlines are in step); what
  // may take long (withdrawing the op's requests: up to a second for a transfer that a live
  // peer does not finish) runs only now, while they listen, so that it cannot make this rank
  // miss their window.
  if (meanwhile) meanwhile();
  Diagnosis d;
  for (size_t i = 0; i < peer_of.size(); ++i) {
    bool ok = requests[i]->wait_until(until);
    if (ok) {
      try {
        requests[i]->rethrow_if_failed();
      } catch (const std::exception&) {
        ok = false;
      }
    }
    const int peer = peer_of[i];
    const Fingerprint& f = theirs[static_cast<size_t>(peer)];
    if (!ok || f.magic != Fingerprint::kMagic)
      d.silent.push_back(peer);
    else if (f.seq != seq_)
      d.elsewhere.emplace_back(peer, f);
    else if (fingerprint_difference(fingerprint_, f) != nullptr)
      d.differ.emplace_back(peer, f);
  }
  // Our own fingerprint must reach the peers still listening before it is withdrawn (a
  // receiver may copy it only when it next looks): until the window closes at most.
  for (size_t i = peer_of.size(); i < requests.size(); ++i) requests[i]->wait_until(until);
  // Our sends and `theirs` must not be touched later (moved, its elements stay in place).
  if (!cancel_all(requests, until))
    keep_until_exit(std::make_shared<std::vector<Fingerprint>>(std::move(theirs)));
  return d;
}

std::string OpContext::explain(const Diagnosis& d, const std::string& tail) const {
  if (!d.differ.empty()) {
    FERRY_THROW(MismatchError, mismatch_message(*this, fingerprint_, d.differ),
                " (found when the op timed out: the calls' messages could not match);", tail);
  }
  auto ranks = [](const std::vector<int>& v) {
    std::string s = v.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s;
  };
  std::string msg;
  for (const auto& [peer, f] : d.elsewhere)
    msg += str(" rank ", peer, " is in ", f.describe(), " instead;");
  if (!d.silent.empty()) {
    msg += str(" ", ranks(d.silent),
               " did not answer (never reached this collective, or already left it);");
  }
  return msg;
}

void OpContext::abort_poisoned() {
  withdraw();
  group_.throw_if_poisoned(str(op_, " (seq ", seq_, ")"));
  FERRY_THROW(Error, "abort_poisoned on a group that is not poisoned (internal error)");
}

OpContext::Waiting OpContext::waiting_on() {
  // A receive means we have not heard from the peer; a send means the peer has not come to
  // take our data.
  auto group_rank_of = [&](int world) {
    for (int r = 0; r < group_.size(); ++r)
      if (group_.members()[r] == world) return r;
    return -1;
  };
  Waiting w;
  for (auto& r : pending_) {
    if (r->test()) continue;
    std::vector<int>& list = r->is_send() ? w.not_taking : w.silent;
    int peer = group_rank_of(r->peer());
    if (std::find(list.begin(), list.end(), peer) == list.end()) list.push_back(peer);
  }
  std::sort(w.silent.begin(), w.silent.end());
  std::sort(w.not_taking.begin(), w.not_taking.end());
  return w;
}

void OpContext::warn_if_stalled(bool native_call) {
  if (stall_warned_ || Clock::now() < stall_at_) return;
  stall_warned_ = true;
  auto ms = [](Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  };
  auto ranks = [](const std::vector<int>& v) {
    std::string s = v.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s;
  };
  std::string msg = str("stall: ", op_, " (seq ", seq_, ") on ", group_.describe(),
                        " has waited ", ms(Clock::now() - start_), " ms (TimeoutError in ",
                        ms(deadline_ - Clock::now()), " ms);");
  if (native_call) {
    msg += str(" inside ", native()->name(), "'s own collective, which does not say whom it "
               "waits for: some rank of the group has not arrived;");
  } else {
    const Waiting w = waiting_on();
    if (!w.silent.empty())
      msg += str(" not arrived: ", ranks(w.silent), " (no data from them yet);");
    if (!w.not_taking.empty())
      msg += str(" ", ranks(w.not_taking), " not yet taking our data;");
    if (w.silent.empty() && w.not_taking.empty()) msg += " its messages are all complete;";
  }
  msg += " a rank that is itself waiting forwards the delay of one that has not arrived";
  // Printed whatever FERRY_DEBUG says (FERRY_STALL_WARN_S=0 silences it): a job that is about
  // to hang for minutes should say so without being asked.
  log_line(LogLevel::Warn, "coll", msg);
}

void OpContext::fail_timeout() {
  const Waiting w = waiting_on();
  const std::vector<int>& silent = w.silent;
  const std::vector<int>& not_taking = w.not_taking;
  auto ranks = [](const std::vector<int>& v) {
    std::string s = v.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s;
  };
  const std::string tail =
      " the group is poisoned (every rank must issue the same collectives in the same order)";
  std::string msg = str(op_, " (seq ", seq_, ") on ", group_.describe(), " timed out after ",
                        deadline_text(), ";");
  msg += explain(diagnose([this] { withdraw(); }), tail);
  if (!silent.empty()) msg += str(" waiting for data from ", ranks(silent), ";");
  if (!not_taking.empty()) msg += str(" waiting for ", ranks(not_taking), " to take our data;");
  msg += tail;
  FERRY_THROW(OwnDeadlineExpired, msg);
}

void OpContext::fail_timeout_waiting_for(const std::string& waiting_for) {
  const std::string tail =
      " the group is poisoned (every rank must issue the same collectives in the same order)";
  std::string msg = str(op_, " (seq ", seq_, ") on ", group_.describe(), " timed out after ",
                        deadline_text(), ";");
  msg += explain(diagnose([this] { withdraw(); }), tail);
  msg += waiting_for;
  msg += tail;
  FERRY_THROW(OwnDeadlineExpired, msg);
}

}  // namespace ferry::detail
