// The fingerprint of a collective call: what every rank of the group must call alike (internal).
//
// Why: a mismatch that only shows across ranks (another dtype of the same width, another
// reduce op or root, another collective at the same sequence number, a rank that skipped one)
// moves the same number of bytes and would combine unrelated data without any error. The
// fingerprint is the op, the dtype, the elements every rank must give (all of them, or per row
// for the forms whose rows may differ), the reduce op, the root, a hash of the split sizes that
// must agree, the group and the sequence number. It is used two ways:
//  - by default, at no cost in messages: its hash (check_hash) is part of the tag of every
//    message of the op's point-to-point algorithms (Tag::check). Ranks that run different
//    calls post messages that never match; at the deadline the timeout diagnosis
//    (OpContext::diagnose) exchanges whole fingerprints, and a peer stuck at the same
//    sequence number with another call turns the timeout into a MismatchError naming both.
//    Native (MPI) collectives carry no tag, so this mode cannot see their mismatches; the MPI
//    transport compares each call's key across the ranks instead (mpi_call_key.h).
//  - under FERRY_CHECK=1, exchanged with every peer before the op runs (exchange_fingerprints),
//    whichever path carries it (native MPI collectives, persistent requests, the exchange
//    rounds, the algorithms): a disagreement fails the op with MismatchError on every rank
//    before any byte of data moves. It costs one round of W - 1 small messages each way.
// Sizes that legitimately differ per peer (gather, scatter, all_to_all with split lists) are not
// compared here; the transports check the byte count of every point-to-point message.
#pragma once

#include <ferry/collectives/engine/op_description.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ferry::detail {

class OpContext;

// Sent as raw bytes between ranks of one job (one binary, one layout): fixed size, no pointers.
struct Fingerprint {
  static constexpr uint32_t kMagic = 0xFE2210F1;
  uint32_t magic = kMagic;
  uint32_t group = 0;
  uint64_t seq = 0;
  char op[24] = {};
  int64_t agreed = -1;
  uint64_t splits = 0;
  int64_t dims[OpSummary::kDims] = {};
  int32_t ndim = 0;
  int32_t root = -1;
  uint8_t has_tensor = 0, lists = 0, dtype = 0, has_reduce_op = 0, reduce_op = 0, per_row = 0;
  uint8_t complete = 1;  // 0: only the op and seq are known (compared only by op name)
  uint8_t pad = 0;

  static Fingerprint of(const char* op, uint64_t seq, uint32_t group, const OpSummary& what);
  // Whether bytes received from a peer form a fingerprint this build could have made: the
  // magic, an op name that ends inside `op`, a dtype, reduce op and ndim in range. A peer's
  // bytes are checked with it before anything else is read from them (a negative ndim once
  // crashed describe(); found by tests/fuzz/fuzz_fingerprint.cpp).
  bool well_formed() const;
  // "all_reduce (sum, float32 [4]) (seq 5)"; for a malformed one, says so and shows the seq.
  std::string describe() const;
};

// "all_reduce of 4096 float32 (sum)", "all_gather of 16 bytes per rank": the call in the words
// of the MPI transport's key check (the shared-memory path's mismatches name it so too).
// `ranks`: the group's size.
std::string short_call(const Fingerprint& f, int ranks);

// Null when `a` and `b` are the same call; otherwise what differs ("the reduce op", ...). A
// malformed fingerprint differs from every other one.
const char* fingerprint_difference(const Fingerprint& a, const Fingerprint& b);

// A 32-bit hash of what the ranks must agree on and a byte count cannot show (the op, the
// reduce op, the root, the dtype among those of its width); the tag carries the group and the
// sequence number. Never 0, which stands for "no fingerprint".
uint32_t check_hash(const Fingerprint& f);

// FERRY_CHECK=1: sends this rank's fingerprint to every peer and compares theirs before the op
// runs. Throws MismatchError naming this rank's call and every differing rank's call.
void exchange_fingerprints(OpContext& ctx, const Fingerprint& mine);

// The MismatchError message for `theirs` (rank `peer`) against `mine` (this rank), or empty.
std::string mismatch_message(const OpContext& ctx, const Fingerprint& mine,
                             const std::vector<std::pair<int, Fingerprint>>& theirs);

}  // namespace ferry::detail
