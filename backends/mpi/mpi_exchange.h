// Collectives of small groups as one or two rounds of MPI point-to-point messages (internal).
//
// Why: MPICH 4.0.2 builds a schedule for every non-blocking collective, which costs about
// 1.2-1.5 us per call on two ranks (64 KiB MPI_Ibcast 7.3 us against 5.7 us for MPI_Bcast;
// 4-26% at 64 KiB over the five ops ferry-bench measures), and above 8 KiB the persistent
// requests of mpi_persistent.h would need staging copies that cost more than that. The
// messages of a one-round algorithm, posted at once with MPI_Isend / MPI_Irecv, cost no
// schedule, and on two ranks they also beat MPICH's blocking algorithms. A standalone MPI
// program (medians over 1,000 alternated iterations, time against the blocking call, 2 ranks)
// measured:
//   all_reduce      0.82-0.92 from 16 KiB to 16 MiB (the two rounds below; a single round
//                   exchanging the whole payload was 1.2-1.27 from 4 MiB up)
//   reduce_scatter  0.57-0.93, all_gather 0.73-0.81, all_to_all 0.63-0.99 (64 KiB-1 MiB)
//   broadcast       1.00-1.02 (one message either way)
// all_gather and all_to_all take this path at every size (for 8 B it also beat the persistent
// request, see mpi_collectives.cpp); all_reduce, reduce_scatter and broadcast only where the
// persistent request does not (above 8 KiB, or past its 64 sizes): their 8 B persistent
// request was faster than a fold through MPI_Reduce_local.
//
// The algorithms, on W ranks, this rank r:
//  - all_reduce: a direct reduce-scatter, then a direct all-gather. The elements split into W
//    blocks (the first count % W one larger). Round 1: every rank sends block p of its input to
//    rank p and folds the W - 1 copies of block r it receives into its own, in rank order.
//    Round 2: it sends the reduced block r to every rank and receives theirs. Each block is
//    reduced by one rank only, so every rank ends with the same bits.
//  - reduce_scatter: round 1 of all_reduce, with the caller's blocks.
//  - all_gather and all_to_all: one round, every block straight to its rank.
//  - broadcast: on two ranks and below 256 KiB only (one message). From 256 KiB, ferry-bench
//    measured the single message 1.05-1.3x MPICH's MPI_Bcast (whose shared-memory copy puts
//    both cores to work), against 1.03-1.15x for MPI_Ibcast; wider groups keep MPI_Ibcast's
//    tree.
//
// Only groups of 2 to kMaxRanks ranks take this path: each round posts W - 1 messages each
// way at once, which suits the ranks of one node, not a cluster. Whether an op takes it
// depends only on the op, its sizes and W, which every rank shares. FERRY_MPI_EXCHANGE=0 turns
// the path off (on every rank alike, or a rank's MPI collective would wait for peers that
// sent point-to-point messages instead).
//
// Progress: MPI moves a collective forward inside any MPI call, whichever request it tests.
// An all_reduce's second round, though, starts only when ferry sees its first round finish, and
// a peer waits for it: if rank 0 waited for op B while rank 1 waited for all_reduce A, neither
// would ever post A's second round (nor would a rank waiting in a point-to-point receive). So
// every all_reduce whose first round is pending is listed process-wide, and every ferry test of
// an MPI request (advance_exchange_rounds, called by all of them) first advances the listed
// ones, as MPI's own progress would.
//
// Tags: the messages travel on the group's `coll` communicator, whose tags below 2^25 carry
// the engine's own point-to-point algorithms (OpContext's phase << 24 | step). Ops can be in
// flight together, and an all_reduce posts its second round only when its first finished,
// possibly after a later op posted its own messages; so every op and round gets its own tag:
// 2^25 + (2 * op sequence number + round) modulo the tags left up to MPI_TAG_UB (2^28 - 1 in
// MPICH: 117 million ops before a tag comes back).
#pragma once

#include "backends/native_collectives.h"

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace ferry::detail {

// Advances every all_reduce of this path whose second round is not posted yet; cheap (one atomic
// load) when there is none. Called by every ferry test or wait of an MPI request.
void advance_exchange_rounds();

class ExchangeCollectives {
 public:
  static constexpr int kMaxRanks = 4;
  static constexpr size_t kPiecewiseBroadcastBytes = size_t{1} << 20;

  // `comm` must outlive this object (the group's `coll` communicator).
  ExchangeCollectives(MPI_Comm comm, int rank, int size, uint32_t group_id, int tag_ub);

  // Whether this group's ops take the path at all (2 to kMaxRanks ranks, not turned off).
  bool enabled() const { return enabled_; }

  // Each returns null when the op does not take this path; the caller then makes MPI's
  // non-blocking call. Arguments as in NativeCollectives, with MPI's types already chosen.
  std::unique_ptr<NativeRequest> all_reduce(const void* in, void* out, size_t count,
                                            MPI_Datatype type, size_t element_bytes, MPI_Op op);
  // Equal blocks of `count` elements.
  std::unique_ptr<NativeRequest> reduce_scatter(const void* in, void* out, size_t count,
                                                MPI_Datatype type, size_t element_bytes,
                                                MPI_Op op);
  std::unique_ptr<NativeRequest> broadcast(void* buf, size_t bytes, int root);
  // Equal blocks of `block` bytes, contiguous in `out`; `in` may be this rank's block of `out`.
  std::unique_ptr<NativeRequest> all_gather(const void* in, void* out, size_t block);
  // Equal blocks of `block` bytes each way.
  std::unique_ptr<NativeRequest> all_to_all(const void* in, void* out, size_t block);

  // The forms with block lists (the v-collectives), in one round as above. Every count must
  // fit an int (the caller checks, as for MPI's own calls).
  // reduce_scatter: rank k's block is the counts[k] elements after those of the ranks before.
  std::unique_ptr<NativeRequest> reduce_scatter_v(const void* in, void* out,
                                                  const std::vector<size_t>& counts,
                                                  MPI_Datatype type, size_t element_bytes,
                                                  MPI_Op op);
  // Rank k's block (bytes[k] bytes) lands at out + offset[k]; `in` may be already there.
  std::unique_ptr<NativeRequest> all_gather_v(const void* in, void* out,
                                              const std::vector<size_t>& bytes,
                                              const std::vector<size_t>& offset);
  // send[p] (send_bytes[p] bytes) goes to rank p, recv[k] (recv_bytes[k]) comes from rank k;
  // this rank's own block is copied, and must be the same size both ways.
  std::unique_ptr<NativeRequest> all_to_all_v(const char* op,
                                              const std::vector<const void*>& send,
                                              const std::vector<size_t>& send_bytes,
                                              const std::vector<void*>& recv,
                                              const std::vector<size_t>& recv_bytes);

 private:
  // The tag of the next op's first round (its second round takes that tag + 1).
  int tag_for_next_op();

  MPI_Comm comm_;
  int rank_;
  int size_;
  uint32_t group_id_;
  bool enabled_;
  int tag_span_ = 0;  // even: the number of tags from 2^25 this path uses
  uint64_t next_op_ = 0;
};

}  // namespace ferry::detail
