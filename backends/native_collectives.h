// The hook through which a transport carries collectives itself (MPI) instead of the engine's
// algorithms over point-to-point.
//
// The engine validates every call identically on every transport, widens 16-bit floats into
// float32 scratch and turns Avg into Sum before it asks a group's NativeCollectives (if it has
// one) to start the op; it then polls the returned NativeRequest against the op's deadline. So
// an implementation only maps already-checked buffers onto its own calls: it sees reductions
// only in dtypes it can reduce natively (never float16 / bfloat16) and never Avg.
//
// One object per group and rank, created with the group (Transport::native_world, then split).
// Its ops are started one at a time, in issue order: by the thread running the group's queued
// ops, or, when the group has nothing queued, by the issuing thread under the group's issue lock
// (collectives/engine/issue.h). Several may then be in flight, and a request may be
// tested by a thread waiting on it while another thread starts the next op.
#pragma once

#include <ferry/backends/transport.h>
#include <ferry/runtime/dtype.h>
#include <ferry/runtime/reduce_op.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace ferry {

// One started collective.
class NativeRequest {
 public:
  virtual ~NativeRequest() = default;
  // True once finished, successfully or not. Never blocks.
  virtual bool test() = 0;
  // Waits (without spinning for long) until finished or `deadline`; false on expiry.
  virtual bool wait_until(Clock::time_point deadline) = 0;
  // After it finished: throws its error (TransportError).
  virtual void rethrow_if_failed() = 0;
  // Its op timed out and the request is kept forever: stop what it still posts or steps on its
  // own (NativeCollectives::abandon_stuck_request calls it). A wrapper forwards it.
  virtual void give_up() {}
};

// `bytes` bytes at `data`: one contiguous piece of a message (written only on a receive).
struct ByteSpan {
  char* data = nullptr;
  size_t bytes = 0;
};

// `parts` spans for each rank of a group: span p of rank k's list is at[k * parts + p]. One
// flat list rather than a list per rank: the engine fills it from storage it reuses.
struct SpanLists {
  ByteSpan* at = nullptr;
  size_t parts = 0;
  ByteSpan* of(size_t rank) const { return at + rank * parts; }
};

// Which of the transport's own ways carries a call: the algorithm table's choice
// (collectives/algorithm_table.h), passed with the call. A way the call cannot take (too
// large for a persistent request, a group size or a form without the exchange, the way
// switched off) falls to the next of Persistent, Exchange, Call; on return `path` holds the
// one taken, which the engine records. Every rank passes the same path for the same op, so
// every rank takes the same way. A transport with one way only takes Call.
enum class NativePath : uint8_t {
  Persistent,  // a persistent request per call shape (MPI: mpi_persistent.h)
  Exchange,    // rounds of point-to-point messages posted when the op starts (mpi_exchange.h)
  Call,        // the transport's non-blocking collective call
};

// Ranks are group ranks. Buffers are the caller's and must stay valid until the request
// finished; a request that never finishes (its op timed out) keeps them forever.
class NativeCollectives {
 public:
  virtual ~NativeCollectives() = default;
  virtual std::string name() const = 0;  // "mpi"

  // `in == out` means in place; otherwise they do not overlap. `count` elements of `dtype`.
  virtual std::unique_ptr<NativeRequest> all_reduce(const void* in, void* out, size_t count,
                                                    DType dtype, ReduceOp op, NativePath& path) = 0;
  // `out` is used on root only (it may be `in` there).
  virtual std::unique_ptr<NativeRequest> reduce(const void* in, void* out, size_t count,
                                                DType dtype, ReduceOp op, int root) = 0;
  // `in` holds sum(counts) elements, rank k's result block is the counts[k] elements after
  // those of the ranks before it; `out` (counts[rank] elements) does not overlap `in`.
  virtual std::unique_ptr<NativeRequest> reduce_scatter(const void* in, void* out,
                                                        const std::vector<size_t>& counts,
                                                        DType dtype, ReduceOp op,
                                                        NativePath& path) = 0;
  virtual std::unique_ptr<NativeRequest> broadcast(void* buf, size_t bytes, int root,
                                                   NativePath& path) = 0;
  // Rank k's block (bytes[k] bytes) lands at out + offset[k]. `in` holds this rank's block;
  // `in == out + offset[rank]` means it is already in place.
  virtual std::unique_ptr<NativeRequest> all_gather(const void* in, void* out,
                                                    const std::vector<size_t>& bytes,
                                                    const std::vector<size_t>& offset,
                                                    NativePath& path) = 0;
  // One buffer each way: block j of `in` (send_bytes[j] at send_offset[j]) goes to rank j,
  // block k of `out` comes from rank k. `in` and `out` do not overlap. Each list holds one
  // entry per rank (spans: the engine passes lists it keeps on its stack).
  virtual std::unique_ptr<NativeRequest> all_to_all_single(
      const void* in, std::span<const size_t> send_bytes, std::span<const size_t> send_offset,
      void* out, std::span<const size_t> recv_bytes, std::span<const size_t> recv_offset,
      NativePath& path) = 0;
  // Lists: send[j] goes to rank j, recv[k] comes from rank k; no buffer overlaps another.
  virtual std::unique_ptr<NativeRequest> all_to_all(const std::vector<const void*>& send,
                                                    const std::vector<size_t>& send_bytes,
                                                    const std::vector<void*>& recv,
                                                    const std::vector<size_t>& recv_bytes,
                                                    NativePath& path) = 0;
  // Several contiguous spans per peer in one collective (the parts of a layout all-to-all), as
  // many to and from every rank: send.of(j) lists the spans that go to rank j, in order;
  // recv.of(k) the spans that come from rank k, one for each of the sender's spans to this rank
  // and of the same size (a size that differs fails as a mismatch). This rank's own spans are
  // copied, span i to span i.
  virtual std::unique_ptr<NativeRequest> all_to_all_spans(SpanLists send, SpanLists recv,
                                                          NativePath& path) = 0;
  // On root, recv[k] receives rank k's `in` (recv[root] may be `in`); elsewhere recv is empty.
  virtual std::unique_ptr<NativeRequest> gather(const void* in, size_t bytes,
                                                const std::vector<void*>& recv,
                                                const std::vector<size_t>& recv_bytes,
                                                int root) = 0;
  // On root, send[k] goes to rank k's `out` (send[root] may be `out`); elsewhere send is empty.
  virtual std::unique_ptr<NativeRequest> scatter(const std::vector<const void*>& send,
                                                 const std::vector<size_t>& send_bytes,
                                                 void* out, size_t bytes, int root) = 0;
  virtual std::unique_ptr<NativeRequest> barrier(NativePath& path) = 0;

  // all_gather, reduce_scatter and all_to_all_single with equal, contiguous blocks (block k at
  // k * block), the common case: the same as the calls above, without size lists to build.
  virtual std::unique_ptr<NativeRequest> all_gather_equal(const void* in, void* out,
                                                          size_t block_bytes, NativePath& path) = 0;
  virtual std::unique_ptr<NativeRequest> reduce_scatter_equal(const void* in, void* out,
                                                              size_t count, DType dtype,
                                                              ReduceOp op, NativePath& path) = 0;
  virtual std::unique_ptr<NativeRequest> all_to_all_equal(const void* in, void* out,
                                                          size_t block_bytes, NativePath& path) = 0;

  // all_gather by the fastest way that takes it, for callers outside the engine (a
  // transport's bootstrap), which have no algorithm table to ask.
  std::unique_ptr<NativeRequest> all_gather(const void* in, void* out,
                                            const std::vector<size_t>& bytes,
                                            const std::vector<size_t>& offset) {
    NativePath path = NativePath::Persistent;
    return all_gather(in, out, bytes, offset, path);
  }

  // Collective over this group, called by every member after the engine agreed on the new
  // group (Group::split): the native collectives of the sub-group this rank joins, with the
  // same (color, key) ordering, identified as `group_id` in Tags. Null for color < 0.
  virtual std::shared_ptr<NativeCollectives> split(int color, int key, uint32_t group_id) = 0;

  // Called once a request of this group was given up (its op timed out): a collective cannot
  // be cancelled, so the implementation must never release what that request may still use.
  virtual void abandon_stuck_request(std::unique_ptr<NativeRequest> request) = 0;
};

}  // namespace ferry
