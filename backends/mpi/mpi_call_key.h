// What the ranks of an MPI collective must give alike, and its comparison across ranks: the
// mismatch check of MPI's default mode (internal).
//
// Why: MPI's collectives carry no tag a mismatch could show in. Ranks that give one collective
// different sizes, dtypes, reduce ops or roots make an erroneous MPI program, and MPICH then
// returns wrong data without an error (all_reduce of 100 against 101 float32 gave rank 0
// 4.17e+07 on 2 ranks; on 5 ranks the ranks disagreed; a reduce_scatter whose ranks split
// differently returned 1 where the sum was 2), hangs, or fails on one rank only. So every
// collective's key (CallKey) is compared across the ranks: in groups of up to
// KeyCheck::kDirectRanks ranks each rank sends its kInts int64 to every peer (point-to-point on
// the group's `coll` communicator, tag kKeyCheckTag), in larger groups one MPI_Iallgather of
// them on the same communicator; either way every rank ends up with every key, and the op
// reports nothing before the keys agreed:
//  - a persistent request (mpi_persistent.h) compares its key once, when it is created, and is
//    first started only once the keys agreed;
//  - every other call (MPI's non-blocking collectives, the point-to-point rounds of
//    mpi_exchange.h, persistent requests past their limits) compares its key per call: the
//    comparison is posted before the op's own messages and runs in flight beside it, and the
//    op's request (CheckedRequest) finishes only once the comparison did. Keys that differ
//    fail the op with MismatchError on every rank, naming the op, the ranks and what each gave;
//    the op itself is then abandoned (its buffers are the process's from then on), whatever it
//    wrote is never handed back as a result.
// Why in flight beside the op rather than the engine's checked step (FERRY_CHECK=1's exchange
// of fingerprints on the group's worker before the op starts): the checked step puts a round
// trip of W - 1 messages each way and two thread hand-offs in front of every op (about 5 us on
// two ranks), where the comparison beside the op costs one small message per peer that
// overlaps the op's own data movement; and it is the very exchange the persistent path's key
// check makes,
// so ranks whose calls straddle that path's limits (8 KiB on one rank, 8 KiB + 4 on another;
// the 64th key on one rank and the 65th on another) still compare with each other at once
// instead of waiting apart until the deadline. One path, one message format per group size.
//
// What is not seen: two ranks that start different persistent requests that already exist
// (every rank compared those keys when they were made; each request then waits for its own
// peers and the op ends at its deadline, with the engine's diagnosis), and float16 against
// float32 (the engine widens 16-bit floats first; FERRY_CHECK=1 compares the tensors' dtypes).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ferry/backends/native_collectives.h>
#include <ferry/runtime/object_pool.h>

namespace ferry::detail {

enum class CallKind : int64_t {
  AllReduce, Reduce, ReduceScatter, Broadcast, AllGather, AllToAll, Gather, Scatter, Barrier
};

// Every rank's key must agree in its first kCompared fields. The rest say what this rank gives
// where the sizes legitimately differ per peer, in a form every rank can check against the
// others' (gather, scatter, all_to_all):
//   gather:  own = the bytes this rank sends; on root, cross = a hash of the bytes it expects
//            from each rank, which every rank compares with the hash of the `own`s it gathered
//   scatter: the same with the bytes each rank receives
//   all_to_all: own / own2 = the bytes this rank sends / receives in all; cross / cross2 = the
//            sums of a hash of (sender, receiver, bytes) over what it sends / receives: when
//            every pair agrees, the sums over all ranks are equal
struct CallKey {
  enum Field { kKind, kType, kOp, kRoot, kCount, kSplits, kOwn, kOwn2, kCross, kCross2, kInts };
  static constexpr int kCompared = kOwn;
  int64_t v[kInts] = {};
};

// Elements (reductions; MPI_BYTE: bytes) every rank gives alike; `root` -1 when none.
CallKey agreed_key(CallKind kind, int64_t count, MPI_Datatype type, MPI_Op op, int root);
// Split sizes that must agree (reduce_scatter's counts, all_gather's bytes): the count when
// they are all equal (the same key as the equal form), else their hash.
CallKey split_key(CallKind kind, const std::vector<size_t>& sizes, MPI_Datatype type, MPI_Op op);
// gather / scatter: `own` bytes from (to) this rank; `expected` (root only, else null) the
// bytes root takes from (gives to) each rank.
CallKey rooted_key(CallKind kind, size_t own, const std::vector<size_t>* expected, int root);
// all_to_all: bytes this rank sends to each rank and receives from each.
CallKey all_to_all_key(int rank, const std::vector<size_t>& send, const std::vector<size_t>& recv);
// The same over `size` ranks' byte counts where they lie.
CallKey all_to_all_key(int rank, size_t size, const size_t* send, const size_t* recv);
// all_to_all with `block` bytes to and from each of `size` ranks.
CallKey all_to_all_key(int rank, int size, size_t block);

// The MPI tag of the key checks' messages on `coll`: between the engine's algorithms (phase
// << 24 | step, phase 0 or 1, so below 2^25 - 1 for any step a group can take) and the
// exchange path's op tags (from 2^25). The MPI transport refuses an algorithm step that would
// reach it. Each rank posts its checks in its ops' order, and MPI matches messages of one tag
// between two ranks in the order they were posted, so the n-th check meets the peers' n-th.
inline constexpr int kKeyCheckTag = (1 << 25) - 1;

// One comparison of every rank's key on `comm`, posted by post(). Its messages and buffers
// live in the object, so a check held in the pool costs no allocation (the caller makes it
// with make_pooled). Not thread-safe: its owner serializes calls.
class KeyCheck {
 public:
  // Up to this many ranks the keys go as point-to-point messages to every peer: where MPICH's
  // MPI_Iallgather builds a schedule per call (3-4 heap allocations and a realloc each, a
  // third of an MPI rank's allocations per DLRM step), the messages cost none. Above it, one
  // MPI_Iallgather (2 (W - 1) messages per rank would cost more than its log2 W rounds).
  static constexpr int kDirectRanks = 8;

  // `op` names the collective in messages (a literal); `expected` as in rooted_key (root only),
  // kept to name the sizes in a message.
  KeyCheck(MPI_Comm comm, int rank, int size, uint32_t group_id, const char* op,
           const CallKey& mine, std::vector<size_t> expected = {});
  KeyCheck(const KeyCheck&) = delete;
  KeyCheck& operator=(const KeyCheck&) = delete;

  // Posts the comparison's messages (once). Throws TransportError when MPI refuses one; the
  // ones posted before it may still be written into by MPI, so the caller then keeps the
  // check as long as the process (keep_forever), as it does any check that never finished.
  void post();

  // True once the comparison finished; outcome() is then null (the keys agreed) or the error
  // (MismatchError, or TransportError when MPI failed).
  bool test();
  const std::exception_ptr& outcome() const { return error_; }
  bool finished() const { return done_; }
  // "all_reduce of 100 float32 (sum) on group 3 rank 0 of 2".
  std::string describe() const;

 private:
  std::exception_ptr compare() const;

  int rank_;
  int size_;
  uint32_t group_id_;
  const char* op_;
  const int64_t* key_of(int r) const;

  MPI_Comm comm_;
  CallKey mine_;
  // kInts per rank: inline up to kDirectRanks ranks, else in `all_large_`.
  int64_t all_small_[CallKey::kInts * kDirectRanks] = {};
  std::vector<int64_t> all_large_;
  std::vector<size_t> expected_;
  // A receive and a send per peer, or the one MPI_Iallgather.
  MPI_Request requests_[2 * (kDirectRanks - 1)] = {};
  int posted_ = 0;
  bool done_ = false;
  std::exception_ptr error_;
};

struct MpiGroupComms;

// The request of an op whose key is compared beside it: finished once both are, and failed
// with the comparison's error when the keys differ. The op is then abandoned as a timed-out
// one is (its communicator marked stuck, the request and whatever MPI may still use kept until
// the process ends): peers that called something else may never complete it.
class CheckedRequest final : public NativeRequest, public Pooled {
 public:
  CheckedRequest(std::shared_ptr<KeyCheck> check, std::unique_ptr<NativeRequest> op,
                 std::shared_ptr<MpiGroupComms> comms);
  ~CheckedRequest() override;

  bool test() override;
  bool wait_until(Clock::time_point deadline) override;
  void rethrow_if_failed() override;
  void give_up() override;

 private:
  std::mutex mu_;
  std::shared_ptr<KeyCheck> check_;
  std::unique_ptr<NativeRequest> op_;
  std::shared_ptr<MpiGroupComms> comms_;
  bool done_ = false;
  std::exception_ptr error_;
  Clock::time_point first_wait_{};
};

}  // namespace ferry::detail
