// Collectives of small groups as rounds of MPI point-to-point messages (internal). This file
// and mpi_exchange.cpp choose and post the messages of each op; mpi_exchange_op.{h,cpp} hold one
// op (its messages, fold, outcome) and the progress of all_reduce's second round.
//
// Why: MPICH 4.0.2 builds a schedule for every non-blocking collective, which costs about
// 1.2-1.5 us per call on two ranks (64 KiB MPI_Ibcast 7.3 us against 5.7 us for MPI_Bcast;
// 4-26% at 64 KiB over the five ops ferry-bench measures), and above 8 KiB the persistent
// requests of mpi_persistent.h would need staging copies that cost more than that. The
// messages of a one-round algorithm, posted at once with MPI_Isend / MPI_Irecv, cost no
// schedule, and on two ranks they also beat MPICH's blocking algorithms. A standalone MPI
// program (medians over 1,000 alternated iterations, time against the blocking call, 2 ranks)
// measured:
//   all_reduce      0.82-0.92 from 16 KiB to 16 MiB (the two rounds below; a single round that
//                   sends the whole payload, which every rank then folds, was 0.85-1.13 up to
//                   1 MiB and 1.2 from 4 MiB, and within ferry 1.7x at 16 KiB)
//   reduce_scatter  0.57-0.93, all_gather 0.73-0.81, all_to_all 0.63-0.99 (64 KiB-1 MiB)
//   broadcast       0.96-1.07 (one message)
//
// The algorithms, on W ranks, this rank r. Every message of a round is posted at once, the
// first round's when the op is issued:
//  - all_reduce: a direct reduce-scatter, then a direct all-gather. The elements split into W
//    blocks (the first count % W one larger). Round 1: every rank sends block p of its input to
//    rank p and folds the W - 1 copies of block r it receives into its own. Round 2: it sends
//    the reduced block r to every rank and receives theirs. Each block is reduced by one rank
//    only, so every rank ends with the same bits.
//  - reduce_scatter: round 1 of all_reduce, with the caller's blocks.
//  - all_gather, all_to_all: every block straight to its rank.
//  - broadcast: on two ranks only, one message (ferry-bench, five alternated runs against
//    MPI_Bcast: 1.15-1.20x at 64 KiB, 1.03-1.10x from 1 MiB, where MPI_Ibcast was 1.28-1.33x
//    and 1.01-1.08x, and four pieces 1.09-1.13x at 1 MiB); wider groups keep MPI_Ibcast's tree.
// The forms with block lists take this path at every size; the rest only where the persistent
// request does not (above 8 KiB, or past its 64 sizes): it compares its key once, where this
// path compares it per call (mpi_call_key.h), and all_reduce's 8 B persistent request was also
// faster than a fold through MPI_Reduce_local.
//
// Only groups of 2 to kMaxRanks ranks take this path: a round posts W - 1 messages each way at
// once, which suits the ranks of one node, not a cluster. Whether an op takes it depends only
// on the op, its sizes and W, which every rank shares. FERRY_MPI_EXCHANGE=0 turns the path off
// (on every rank alike, or a rank's MPI collective would wait for peers that sent point-to-point
// messages instead).
//
// Progress: MPI moves its own collectives forward inside any MPI call. Every round here but
// all_reduce's second is posted when the op is issued, so MPI's progress alone finishes it. The
// second round, though, can only be posted by ferry once the first finished on this rank, and
// the peers wait for it: a rank that waits for another op, or sits in a ferry recv or in the
// user's own MPI_Barrier, must still post it. So every all_reduce whose second round is due is
// listed process-wide, and (a) every ferry test or wait of any MPI request first steps the
// listed ones (advance_exchange_rounds), as MPI's progress engine would, and (b) the process's
// progress thread (runtime/progress.h) steps them every 1 ms while any is listed, for a rank
// that makes no ferry call at all (it sleeps after 50 ms with none listed, and is stopped before
// MPI_Finalize).
//
// Tags: the messages travel on the group's `coll` communicator, whose tags below 2^25 carry the
// engine's own point-to-point algorithms (OpContext's phase << 24 | step). Ops can be in flight
// together, and an all_reduce posts its second round only when its first finished, possibly
// after a later op posted its messages; so every op and round gets its own tag: 2^25 + 2 * op
// sequence number + round, modulo the tags left up to MPI_TAG_UB (2^28 - 1 in MPICH: 117 million
// ops before a tag comes back; MPIs with fewer than 2^20 tags up there do not get this path).
// Within one round, messages between two ranks match in the order they were posted (MPI does
// not overtake on one tag).
#pragma once

#include <ferry/backends/native_collectives.h>

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace ferry::detail {

// Whether the spans `rank` sends to itself differ in number or size from those it receives from
// itself (an all_to_all_spans copies them span by span, so they must pair up).
inline bool own_spans_differ(SpanLists send, SpanLists recv, int rank) {
  const auto me = static_cast<size_t>(rank);
  if (send.parts != recv.parts) return true;
  for (size_t i = 0; i < send.parts; ++i)
    if (send.of(me)[i].bytes != recv.of(me)[i].bytes) return true;
  return false;
}

// Steps every all_reduce whose second round is due (see "Progress"), and starts every persistent
// request whose first start waited for its key check (mpi_persistent.h); cheap (two atomic
// loads) when there is none. Called by every ferry test of an MPI request.
void advance_exchange_rounds();
// For a request that timed out (abandoned by the engine): NativeRequest::give_up, which stops
// stepping one of this path (directly or through a wrapper).
void give_up_exchange(NativeRequest& request);

class ExchangeCollectives {
 public:
  static constexpr int kMaxRanks = 4;

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

  // The forms with block lists (the v-collectives). Every count must fit an int (the caller
  // checks, as for MPI's own calls).
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
  std::unique_ptr<NativeRequest> all_to_all_v(const char* op, std::span<const void* const> send,
                                              std::span<const size_t> send_bytes,
                                              std::span<void* const> recv,
                                              std::span<const size_t> recv_bytes);
  // Several spans per peer (NativeCollectives::all_to_all_spans): one message per span, which
  // match in order on the op's tag; this rank's own spans are copied.
  std::unique_ptr<NativeRequest> all_to_all_spans(SpanLists send, SpanLists recv);

 private:
  int tag_for_next_op();

  MPI_Comm comm_;
  int rank_;
  int size_;
  uint32_t group_id_;
  bool enabled_;
  int tag_span_ = 0;  // the number of tags from 2^25 this path uses
  uint64_t next_op_ = 0;
};

}  // namespace ferry::detail
