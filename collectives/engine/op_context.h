// What an algorithm sees of the op it carries: the group's ranks, tagged point-to-point with
// the op's sequence number, a deadline, and scratch memory.
//
// Algorithms post sends and receives, then wait_all(). A wait that outlives the deadline raises
// TimeoutError naming the op, the group, the sequence number and the peers not heard from; any
// failure withdraws the op's other pending requests first, so no buffer is touched afterwards.
#pragma once

#include <ferry/backends/transport.h>
#include <ferry/collectives/engine/fingerprint.h>
#include <ferry/collectives/engine/group_impl.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/object_pool.h>
#include <ferry/runtime/small_vector.h>
#include <ferry/runtime/tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ferry::detail {

// The TimeoutError of an op whose own deadline expired (as opposed to one that failed because
// its group was poisoned meanwhile): the engine tells the two apart.
class OwnDeadlineExpired final : public TimeoutError {
 public:
  using TimeoutError::TimeoutError;
};

// `error` as the caller may see it: an OwnDeadlineExpired becomes a plain TimeoutError with the
// same message (an uncaught one is named by its type), anything else is returned as it is.
std::exception_ptr public_error(std::exception_ptr error);

// Keeps memory a transport may still write into (a receive it could not withdraw) until the
// process ends: it must never be freed or reused.
void keep_until_exit(std::shared_ptr<const void> keep);

// From the object pool (object_pool.h) when allocated: an op posted at issue keeps its context
// in flight.
class OpContext : public Pooled {
 public:
  // `op` names the op in messages; it must outlive the context (every op's name is a literal):
  // a std::string of it would allocate for each op.
  OpContext(GroupImpl& group, const char* op, uint64_t seq, Clock::time_point deadline);
  // An op whose fingerprint is known when it starts (one started at issue): the fingerprint
  // and its hash are set once, and `start` is the moment its deadline was taken from, so that
  // the issue path reads the clock and hashes the call once each.
  OpContext(GroupImpl& group, const char* op, const Fingerprint& f, Clock::time_point start,
            Clock::time_point deadline);
  ~OpContext();  // cancels whatever is still pending
  OpContext(const OpContext&) = delete;
  OpContext& operator=(const OpContext&) = delete;

  // This rank and the ranks it talks to: the group's, or those of a view (narrow()).
  int rank() const { return view_.size > 0 ? view_.rank : group_.rank(); }
  int size() const { return view_.size > 0 ? view_.size : group_.size(); }

  // Some of the group's ranks seen as a group of their own, for an algorithm made of others run
  // on parts of the group (the hierarchical all_reduce: a host's ranks, then one rank per host).
  // While narrowed, rank(), size() and the peers of send / recv are the view's (view rank k is
  // group rank ranks[k]), and every step is offset by `first_step`, so that the messages of two
  // parts between one pair of ranks never match each other. `ranks` must outlive the view.
  struct View {
    const int* ranks = nullptr;
    int size = 0;  // 0: no view
    int rank = 0;  // this rank's index in `ranks`
    uint32_t first_step = 0;
  };
  void narrow(const View& v) { view_ = v; }
  uint32_t phase() const { return phase_; }
  void widen() { view_ = View{}; }
  const char* op() const { return op_; }
  uint64_t seq() const { return seq_; }
  Clock::time_point deadline() const { return deadline_; }
  // When the op was issued: the clock read its deadline was taken from.
  Clock::time_point started_at() const { return start_; }

  // `peer` is a group rank; `step` tells the messages of one op apart (a pair of ranks that
  // exchanges several messages in one op gives each its own step). Every buffer passed here
  // must outlive the op even when it fails: the caller's tensors (kept by the op's Work), the
  // group's scratch, or memory the op allocated itself and handed to hold() first.
  void send(int peer, uint32_t step, const void* data, size_t bytes);
  void recv(int peer, uint32_t step, void* data, size_t bytes);
  // The same through a layout (byte_layout.h): the message's bytes are not contiguous.
  void send(int peer, uint32_t step, ByteLayout layout);
  void recv(int peer, uint32_t step, ByteLayout layout);
  // Completes every request posted so far.
  void wait_all();
  // Never blocks: true once every request posted so far completed (then as wait_all); throws
  // as wait_all does when one failed. The deadline is wait_all's business.
  bool test_all();

  // Later steps are numbered afresh: an op made of phases (sizes, then data) calls this between.
  // At most kMaxPhases phases (0 and 1): the UCX transport's tag has one bit for the phase
  // (ucx_tag.h). A third throws InvalidArgument here, whichever transport runs the op, so that
  // an algorithm that needs more fails its first test instead of only on UCX.
  static constexpr uint32_t kMaxPhases = 2;
  void next_phase() {
    FERRY_CHECK(phase_ + 1 < kMaxPhases, InvalidArgument, "ferry: ", op_, " on group ",
                group_.id(), " would start phase ", phase_ + 1, ", but ops have at most ",
                kMaxPhases, " phases (the UCX tag has room for phases 0 and 1; internal error)");
    phase_ += 1;
  }

  // Large buffers of a group on one host lie in shared memory, which its peers map (a 16-bit
  // reduction's float32 copies are read by them: scratch_arena.h).
  char* scratch(int slot, size_t bytes) {
    return group_.scratch().get(slot, bytes, group_.one_host());
  }

  // Memory the op allocated itself (an output, a size exchange's buffer) that its sends read or
  // its receives write: held until the context goes, and for the rest of the process when a
  // request could not be withdrawn (buffers_kept), since the transport may still touch it after
  // the op's body unwound. Inline up to kInlineHeld: an op that holds a few allocates nothing
  // for it.
  void hold(const Tensor& t) { held_.push_back(t.keep_alive()); }
  void hold(std::shared_ptr<const void> memory) { held_.push_back(std::move(memory)); }
  static constexpr size_t kInlineHeld = 4;

  // The op's fingerprint (fingerprint.h): its hash goes into the tag of every later message,
  // and the timeout diagnosis compares it with the peers'. exchange_fingerprints posts its
  // messages at step kFingerprintStep before this is called (with no hash in their tags, so
  // that ranks running different ops still meet).
  void set_fingerprint(const Fingerprint& f);
  static constexpr uint32_t kFingerprintStep = (1u << 14) - 1;  // the UCX tag's largest step

  // The group's transport collectives, or null (then the algorithms run over send / recv).
  NativeCollectives* native() const { return group_.native(); }
  // Records that this op runs `c` with `a` (GroupImpl::runs).
  void ran(Collective c, Algorithm a) { group_.count_run(c, a); }
  GroupImpl& group() const { return group_; }
  // Waits for a native collective under the op's deadline. A native collective cannot be
  // withdrawn: on a timeout (or when the group is poisoned meanwhile) the request, `keep` (the
  // tensors it reads or writes) and the group's scratch are kept for the rest of the process,
  // and the TimeoutError says that the job must end.
  void wait_native(std::unique_ptr<NativeRequest> request, std::vector<Tensor> keep);
  // Withdraws every request still pending (all at once, bounded by the op's deadline). Also
  // done by the destructor; an owner of buffers the requests write into calls it first, so
  // that buffers_kept() is known before those buffers go.
  void withdraw();
  // True once a withdrawn send or receive could not be confirmed let go of (Request::let_go):
  // the transport may still write into a receive's buffer or read a send's, so whoever owns the
  // op's buffers keeps them for the rest of the process (the group's scratch and what the op
  // held are kept already).
  bool buffers_kept() const { return buffers_kept_; }
  // For an op that uses none of the group's scratch (one started at issue, waited on by a
  // caller's thread): giving it up must not touch the scratch the worker may be using.
  void uses_no_scratch() { leak_scratch_on_abandon_ = false; }
  // For a context made only to wait out an op that started earlier (a native start at issue):
  // FERRY_TIMELINE shows the op from when it started, not from when this wait began.
  void started_on_the_wall_at(std::chrono::system_clock::time_point t) { wall_start_ = t; }

  // For a path that waits on something else than this context's requests (shared memory,
  // collectives/shm/): the op's fingerprint, the moment its wait gives up (the deadline less
  // the diagnosis window), and its timeout with the same diagnosis as wait_all's: the peers'
  // answers say whether a rank is stuck in another call at this sequence number (then
  // MismatchError naming both), `waiting_for` (" group rank 1 did not arrive;") says whom this
  // rank waited for. Throws OwnDeadlineExpired or MismatchError.
  const Fingerprint& fingerprint() const { return fingerprint_; }
  // check_hash(fingerprint()), as set_fingerprint computed it.
  uint32_t check() const { return check_; }
  Clock::time_point give_up() const { return give_up_; }
  [[noreturn]] void fail_timeout_waiting_for(const std::string& waiting_for);
  // A member of the group that entered finalize without issuing this op (it never will): why,
  // for a PeerFailure, after noting that member on the group (GroupImpl::note_member_ended);
  // "" otherwise. Asked between the slices of a wait (this context's, or shared memory's).
  std::string departed_peer() const;

 private:
  // The deadline's derived times (the diagnosis window, the give-up and stall times).
  void set_times();
  Tag tag(uint32_t step) const;
  // The group ranks the pending requests wait on: receives not yet heard from, and sends a
  // peer has not come to take. Both the stall warning and the timeout name them.
  struct Waiting {
    std::vector<int> silent;
    std::vector<int> not_taking;
  };
  Waiting waiting_on();
  // The stall inspector: once, when the op has waited past stall_at_, a WARN line names whom it
  // waits for. Called between the slices of a wait, so it costs a clock read per slice.
  void warn_if_stalled(bool native_call);
  [[noreturn]] void fail_timeout();
  void abandon_native(std::unique_ptr<NativeRequest> request, std::vector<Tensor> keep);
  // Keeps tensors a transport may still write into until the process ends.
  static void keep_for_life(std::vector<Tensor> keep);
  [[noreturn]] void abort_poisoned();
  // Throws the error of the first finished request that failed, after cancelling the rest.
  void rethrow_first_failure();
  // "its 10000 ms deadline", for a timeout's message.
  std::string deadline_text() const;
  static constexpr auto kCheckEvery = std::chrono::milliseconds(50);
  bool leak_scratch_on_abandon_ = true;
  bool buffers_kept_ = false;
  // After a timeout: what the peers answered about the op they are in (diagnose()).
  struct Diagnosis {
    std::vector<int> silent;                             // no answer: finished, or never came
    std::vector<std::pair<int, Fingerprint>> elsewhere;  // in another op (another seq)
    std::vector<std::pair<int, Fingerprint>> differ;     // same seq, another call
  };
  // `meanwhile` runs once the messages are out, before the answers are collected.
  Diagnosis diagnose(const std::function<void()>& meanwhile = nullptr);
  // The diagnosis as the middle of a timeout message; throws MismatchError when some peer
  // is stuck at this sequence number in another call (`tail` ends that message).
  std::string explain(const Diagnosis& d, const std::string& tail) const;

  GroupImpl& group_;
  const char* op_;
  uint64_t seq_;
  Clock::time_point start_;
  Clock::time_point deadline_;
  Clock::duration diagnosis_window_{};
  Clock::time_point give_up_;  // deadline_ less the diagnosis window
  Clock::time_point stall_at_;  // when the stall warning is due (max(): never)
  bool stall_warned_ = false;
  std::chrono::system_clock::time_point wall_start_;  // for FERRY_TIMELINE
  uint32_t phase_ = 0;
  View view_;
  // The world rank of `peer`, a rank of the view if one is set, else of the group.
  int member(int peer) const {
    return group_.members()[static_cast<size_t>(view_.size > 0 ? view_.ranks[peer] : peer)];
  }
  uint32_t check_ = 0;
  Fingerprint fingerprint_;
  // Inline: an op of a few ranks posts a few requests, and a list of them allocated per op
  // cost more than the small op's transfer.
  SmallVector<std::unique_ptr<Request>, 8> pending_;
  SmallVector<std::shared_ptr<const void>, kInlineHeld> held_;  // hold()
};

}  // namespace ferry::detail
