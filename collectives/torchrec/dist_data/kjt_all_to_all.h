// torchrec's KJTAllToAll (dist_data.py): the two-phase redistribution of a KeyedJaggedTensor's
// features to the ranks that hold their tables.
//
//   KJTAllToAll a2a(group, /*splits=*/{2, 1});          // keys 0-1 to rank 0, key 2 to rank 1
//   KJTAllToAllSplitsAwaitable p1 = a2a(kjt);            // phase 1 issued, returns at once
//   KJTAllToAllTensorsAwaitable p2 = p1.wait();          // phase 1 done and checked, phase 2 issued
//   KeyedJaggedTensor mine = p2.wait();                  // my keys, every rank's samples
//   // or simply a2a(kjt).wait().wait()
//
// splits[j] = number of consecutive keys that go to rank j (the KJT's keys are ordered by
// destination); the same on every rank, as are the keys and the stagger. Rank me receives the
// keys of its split with the samples of every source, sources in recat order (stagger 1: rank
// order; stagger = W / local_size: node-major order, as table-row-wise sharding wants), so its
// stride is the sum of the sources' strides (unequal batch sizes per rank are fine). Weights move
// with their values; with a variable stride per key the strides of every (source, key) travel
// too and the result has stride_per_key_per_rank. W = 1 returns the input unchanged.
//
// Phase 1 (issued by operator() / forward): ONE all_gather of a fixed-size int64 record per rank
// (7 + 4W + sum(splits) words): the counts this rank sends to every destination for every label
// (lengths, values, strides, weights: kjt_dist_splits), its stride, a status word (0, or why its
// own input was rejected), fingerprints of its keys, splits, stagger, dtypes and limit, and its
// values per key (length_per_key). torchrec sends each destination only its own row (an
// all_to_all); here every rank sees the whole count matrix, so every check below gives the same
// answer on every rank and a bad call fails on all of them in the same wait, before any payload
// moves, and the group stays usable. The record grows with W and the keys (W x (7 + 4W + K)
// words received per rank: 130 KiB at W = 64, plus 512 B per key at W = 64). Ranks whose splits
// sum to different key counts send records of different sizes: the local and UCX transports fail
// that all_gather with MismatchError at once; MPI's native all_gather cannot tell (run with
// FERRY_CHECK=1 to catch it there, as for any collective whose sizes disagree).
//
// Phase 2 (issued by KJTAllToAllSplitsAwaitable::wait, after the checks): every label moves with
// input splits = the counts I send, output splits = the counts I receive. With a uniform stride
// per key phase 1 has told every rank where each (source, key) segment belongs in the result (its
// lengths are the source's stride, its values that source's count for the key, in recat order:
// get_recat(splits[me], W, stagger)), so the labels move as the parts of ONE laid-out
// all_to_all_single and are received straight into the result's buffers: no staging buffer and
// no reassembly (the local transport copies each byte once; MPI and UCX unpack a received block
// once). wait() then checks every
// segment's lengths against the count it was placed by. With a variable stride per key each
// label has an all_to_all_single of its own and the received buffers go through kjt_dist_init.
//
// Errors, all raised by KJTAllToAllSplitsAwaitable::wait() on EVERY rank (none by operator()):
//  - a rank's input rejected (splits that do not sum to its number of keys): InvalidArgument;
//    the rank whose input it was gets the full message, the others "rank r rejected its input";
//  - ranks disagreeing on the keys (or their order), the splits, the stagger, the weightedness,
//    the variable stride per key, the lengths / weights dtypes, or the limit: MismatchError
//    naming the ranks that differ from rank 0;
//  - a receiving rank whose counts would overflow int64 or exceed max_recv_elements
//    (per label): InvalidArgument naming the receiving rank and the count.
// The constructor throws InvalidArgument (on the calling rank, no collective issued) for splits
// whose size is not W, negative splits, or a stagger that does not divide W. Ids are not
// differentiable: nothing is recorded on the autograd tape.
//
// Awaitables: copies share state; both waits are idempotent (a second wait returns the same
// phase-2 awaitable / the same KJT, or rethrows the same error). Each must be waited on every
// rank, in the same order relative to the group's other collectives. Callbacks (Awaitable's
// then()) apply to each wait's result, as for any ferry Awaitable.
#pragma once

#include <ferry/collectives/group.h>
#include <ferry/collectives/torchrec/sparse/keyed_jagged_tensor.h>
#include <ferry/runtime/awaitable.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ferry::torchrec {

namespace detail {
struct KjtA2aState;
}

struct KJTAllToAllOptions {
  // Largest number of elements a rank may receive for one label (lengths, values, strides,
  // weights); checked on every rank after phase 1. The default only guards int64 byte counts.
  int64_t max_recv_elements = std::numeric_limits<int64_t>::max() / 16;
  // Hands each phase's collectives to background progress (Work::progress_in_background: the
  // group's worker, which also drives an MPI collective started at issue) so they advance while
  // the caller computes between launch and wait (a train pipeline's next-batch input dist). Off:
  // an MPI collective started at issue advances only inside the waits.
  bool progress_in_background = true;
};

// Phase 2 in flight; wait() returns the received KJT. The accessors are valid at once (they
// describe the exchange that phase 1 settled).
class KJTAllToAllTensorsAwaitable : public Awaitable<KeyedJaggedTensor> {
 public:
  explicit KJTAllToAllTensorsAwaitable(std::shared_ptr<detail::KjtA2aState> state);

  // kjt_dist_labels of the input: "lengths", "values", ["strides"], ["weights"].
  const std::vector<std::string>& labels() const;
  // [label][rank]: elements of each label I send to rank j / receive from rank s (torchrec's
  // input_splits / output_splits). For the sequence embedding dist: input_splits("values")[j]
  // is the number of ids I sent to rank j, output_splits("values")[s] the ids rank s sent me
  // (in source order, before the recat).
  const std::vector<std::vector<int64_t>>& input_splits() const;
  const std::vector<std::vector<int64_t>>& output_splits() const;
  const std::vector<int64_t>& input_splits(const std::string& label) const;
  const std::vector<int64_t>& output_splits(const std::string& label) const;
  // Batch size of every source rank (empty with a variable stride per key).
  const std::vector<int64_t>& stride_per_rank() const;
  // The keys I receive (my split of the keys).
  const std::vector<std::string>& keys() const;
  // The segment permutation applied on receipt (get_recat(splits[me], W, stagger)).
  const std::optional<std::vector<int64_t>>& recat() const;
  // The key splits and stagger of the call.
  const std::vector<int64_t>& splits() const;
  int64_t stagger() const;

 private:
  std::shared_ptr<detail::KjtA2aState> state_;
};

// Phase 1 in flight; wait() checks the exchanged counts, issues phase 2 and returns its
// awaitable.
class KJTAllToAllSplitsAwaitable : public Awaitable<KJTAllToAllTensorsAwaitable> {
 public:
  explicit KJTAllToAllSplitsAwaitable(std::shared_ptr<detail::KjtA2aState> state);
};

class KJTAllToAll {
 public:
  KJTAllToAll(Group group, std::vector<int64_t> splits, int64_t stagger = 1,
              KJTAllToAllOptions options = {});

  // Issues phase 1 and returns at once. Must be called on every rank of the group.
  KJTAllToAllSplitsAwaitable forward(const KeyedJaggedTensor& input) const;
  KJTAllToAllSplitsAwaitable operator()(const KeyedJaggedTensor& input) const { return forward(input); }

  const Group& group() const { return group_; }
  const std::vector<int64_t>& splits() const { return splits_; }
  int64_t stagger() const { return stagger_; }

 private:
  Group group_;
  std::vector<int64_t> splits_;
  int64_t stagger_;
  KJTAllToAllOptions options_;
};

}  // namespace ferry::torchrec
