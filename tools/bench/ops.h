// The operations ferry-bench measures, with the nccl-tests conventions for what "size" means and
// how bus bandwidth is derived, so numbers can be compared with nccl-tests and OSU runs.
#pragma once

#include <ferry/ferry.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::bench {

enum class OpKind {
  AllReduce, AllGather, ReduceScatter, AllToAll, Broadcast, Reduce, Barrier, Memcpy
};

// Every op in the order `--op all` runs them.
const std::vector<OpKind>& all_ops();
const char* op_name(OpKind op);
std::optional<OpKind> op_from_name(std::string_view name);
std::string op_names();  // "all_reduce, all_gather, ..." for messages

// Elements the op's count refers to for a per-rank buffer of `bytes`: all_reduce, broadcast,
// reduce: the tensor; all_gather: the output; reduce_scatter: the input; all_to_all: the whole
// input. Rounded down to a multiple of the world size where the op splits the buffer in W blocks.
int64_t element_count(OpKind op, size_t bytes, DType dtype, int world_size);

// busbw / algbw (nccl-tests' PERFORMANCE.md): the fraction of the data each rank must move over
// its slowest link, so busbw of a good implementation approaches the link bandwidth whatever W is.
double bus_factor(OpKind op, int world_size);

// Where an op writes its result. nccl-tests times both forms of the ops that have them; so does
// ferry-bench. all_reduce: output is input; all_gather: input is this rank's block of output;
// reduce_scatter: output is this rank's block of input; reduce: output is input on the root.
// broadcast has only the in-place form, all_to_all only the out-of-place one.
enum class Place { OutOfPlace, InPlace };
const char* place_name(Place place);  // "out", "in"
// The forms `op` has, out-of-place first.
std::vector<Place> places_of(OpKind op);

// Where a row's tensors lie (--memory): ordinary storage, or shared memory (empty_shared),
// which the shared-memory path reads straight out of a peer's buffers. Shared rows carry
// "+shared" after their algorithm.
enum class Memory { Private, Shared };
const char* memory_name(Memory memory);  // "private", "shared"

// The bytes one rank must copy for `op` on a per-rank buffer of `bytes` (the row's size): the
// bytes it must read plus those it must write, / 2, since a memcpy of n bytes reads n and
// writes n. Every rank's input is read once and every rank's output written once, by some
// rank, the work split evenly, each byte read where it lies (single copy; a reduction's
// operands are read, a rank's result may be written into its peers' outputs). Per rank, with
// W ranks and S = size:
//   all_reduce: (S + S) / 2 = S: its 1/W of every input, its 1/W slice into every output;
//   reduce_scatter: (S + S/W) / 2: its block of every input (its own too: it is an operand),
//     written once;
//   all_gather out of place: (S/W + S) / 2: every block of its output is written, its own
//     too; in place: (S/W + (W-1)/W S) / 2 = S/2, its own block already lies in place;
//   all_to_all: (S + S) / 2 = S: its whole input read, its whole output written, its own block
//     included (always out of place);
//   broadcast: (S/W + (W-1)/W S) / 2 = S/2: the root's S read once, W-1 outputs written;
//   reduce: (S + S/W) / 2: every input read once, the root's output written once;
//   barrier: 0 (no bytes: no ideal time); memcpy: size. A group of one rank: 0.
// ideal_us = these bytes / the copy bandwidth measured at the start of the run, every rank
// copying kIdealCopyBytes at once, as every rank moves bytes at once in an op; the
// reduction's arithmetic is taken to hide behind the copy.
double ideal_bytes(OpKind op, size_t bytes, int world_size, Place place);

// The copy rates behind ideal_us (bytes per second): per rank with every rank copying at once
// (what ideal_us uses), and rank 0 copying alone (printed for comparison; 0 elsewhere).
struct CopyBandwidth {
  double together = 0;
  double alone = 0;
};

// The copy that measures the bandwidth behind ideal_us: well beyond the caches, as the large
// collectives' buffers are.
inline constexpr size_t kIdealCopyBytes = size_t{64} << 20;

// The algorithm the runtime picks for `count` elements, as printed in the table, on a transport
// with (`native`) or without collectives of its own, for ranks placed as `placement` says (one
// host: the shared-memory rows; several hosts sharing some: the hierarchical ones).
// choose_algorithm takes the bytes of one rank's input, which for all_gather is 1/W of the
// reported size.
std::string algorithm_for(OpKind op, int64_t count, DType dtype, int world_size, bool native,
                          Placement placement);
// The collective `op` is (none for memcpy): the key of GroupImpl::runs, which says which
// algorithm ran.
std::optional<Collective> collective_of(OpKind op);

// The tensors of one collective at one size on one rank. Inputs are filled with values that
// depend on the sending rank (and block), so check() can tell a right result from a stale or
// misplaced one.
class OpCase {
 public:
  // `op` must not be Memcpy; `place` must be one of places_of(op). Allocates and touches every
  // buffer, so no page fault lands in a timed iteration.
  OpCase(OpKind op, int64_t count, DType dtype, const Group& group,
         Place place = Place::OutOfPlace, Memory memory = Memory::Private);

  // Issues the op once. Out of place, repeating it is harmless: inputs are never written
  // (broadcast rewrites the root's own values). In place, each run reduces the previous
  // result again, as nccl-tests' in-place loop does; reset() starts over.
  Work launch();

  // Writes the inputs again and a value no op produces into every output element, so that a
  // run after it that moves nothing (or too little) is counted wrong rather than passing on
  // the results of earlier runs.
  void reset();

  // After one launch() has completed: empty when this rank's outputs are right, otherwise a
  // description of the first wrong element. Samples the first, middle and last element of each
  // block rather than every element: it runs once per size and must stay cheap at 64 MiB.
  std::string check() const;

  // After one launch() that followed reset(): the number of this rank's output elements that
  // differ from the expected result, every element compared (nccl-tests' #wrong).
  int64_t count_wrong() const;

  // Testing the column itself (ferry-bench --test-corrupt): overwrites `n` output elements
  // (at most the output's size) with a wrong value, as a faulty op would have left them.
  void corrupt_for_test(int64_t n);

 private:
  // The value output element `i` must hold on this rank.
  double expected_at(int64_t i) const;
  void fill_inputs();

  std::string check_range(const Tensor& t, int64_t begin, int64_t end, double expected,
                          const std::string& what) const;

  OpKind op_;
  int64_t count_;
  DType dtype_;
  Group group_;
  Place place_;
  int64_t block_;  // elements per rank's block (count_ for ops that do not split)
  Tensor input_;
  Tensor output_;
};

// The root of broadcast and reduce (nccl-tests' default).
inline constexpr int kRoot = 0;

// Times std::memcpy of `bytes` between two preallocated buffers, one sample per call. Small
// copies are repeated inside a sample so the clock's own cost (~20 ns) does not dominate; the
// sample is the time of one copy.
class MemcpyCase {
 public:
  explicit MemcpyCase(size_t bytes);
  double time_one_seconds();
  // Empty when the last copy delivered the source bytes.
  std::string check() const;
  // Clears the destination, copies once and returns the bytes that differ from the source.
  int64_t count_wrong();

  // After one launch() that followed reset(): the number of this rank's output elements that
  // differ from the expected result, every element compared (nccl-tests' #wrong).
  int64_t count_wrong() const;

  // Testing the column itself (ferry-bench --test-corrupt): overwrites `n` output elements
  // (at most the output's size) with a wrong value, as a faulty op would have left them.
  void corrupt_for_test(int64_t n);

 private:
  // The value output element `i` must hold on this rank.
  double expected_at(int64_t i) const;
  void fill_inputs();

  size_t bytes_;
  int reps_;
  Tensor src_;
  Tensor dst_;
};

}  // namespace ferry::bench
