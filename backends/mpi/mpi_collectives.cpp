#include <ferry/backends/mpi/mpi_collectives.h>

#include <ferry/backends/mpi/mpi_block_lists.h>
#include <ferry/backends/mpi/mpi_call_key.h>
#include <ferry/backends/mpi/mpi_error.h>
#include <ferry/backends/mpi/mpi_exchange.h>
#include <ferry/backends/mpi/mpi_persistent.h>
#include <ferry/backends/mpi/mpi_request.h>
#include <ferry/backends/mpi/mpi_types.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/small_vector.h>

#include <algorithm>
#include <span>

namespace ferry::detail {
namespace {

class MpiCollectiveRequest final : public NativeRequest, public Pooled {
 public:
  MpiCollectiveRequest(const char* op, uint32_t group_id) : pending_(op, group_id) {}
  bool test() override { return pending_.test(); }
  bool wait_until(Clock::time_point deadline) override { return pending_.wait_until(deadline); }
  void rethrow_if_failed() override { pending_.rethrow_if_failed(); }
  MpiPending& pending() { return pending_; }

 private:
  MpiPending pending_;
};

class MpiCollectives final : public NativeCollectives {
 public:
  MpiCollectives(std::shared_ptr<MpiWorld> world, uint32_t id,
                 std::shared_ptr<MpiGroupComms> comms)
      : world_(std::move(world)), id_(id), comms_(std::move(comms)) {
    MPI_Comm_rank(comms_->coll, &rank_);
    MPI_Comm_size(comms_->coll, &size_);
    persistent_ = std::make_unique<PersistentCollectives>(comms_->coll, rank_, size_, id_);
    exchange_ = std::make_unique<ExchangeCollectives>(comms_->coll, rank_, size_, id_,
                                                      world_->tag_ub());
    world_->add(id_, comms_);
  }
  ~MpiCollectives() override { world_->remove(id_); }

  std::string name() const override { return "MPI"; }

  std::unique_ptr<NativeRequest> all_reduce(const void* in, void* out, size_t count,
                                            DType dtype, ReduceOp op, NativePath& path) override {
    const int n = fit(count, "all_reduce", "elements");
    if (path == NativePath::Persistent) {
      if (auto p = persistent_->all_reduce(in, out, n, mpi_datatype(dtype), dtype_size(dtype),
                                           mpi_op(op)))
        return p;
      path = NativePath::Exchange;
    }
    const CallKey key = agreed_key(CallKind::AllReduce, n, mpi_datatype(dtype), mpi_op(op), -1);
    return checked("all_reduce", key, [&]() -> std::unique_ptr<NativeRequest> {
      if (path == NativePath::Exchange) {
        if (auto x = exchange_->all_reduce(in, out, count, mpi_datatype(dtype),
                                           dtype_size(dtype), mpi_op(op)))
          return x;
        path = NativePath::Call;
      }
      auto r = start("all_reduce");
      const void* send = in == out ? MPI_IN_PLACE : in;
      check_started(*r, MPI_Iallreduce(send, out, n, mpi_datatype(dtype), mpi_op(op),
                                       comms_->coll, r->pending().handle()),
                    "MPI_Iallreduce");
      return r;
    });
  }

  std::unique_ptr<NativeRequest> reduce(const void* in, void* out, size_t count, DType dtype,
                                        ReduceOp op, int root) override {
    const int n = fit(count, "reduce", "elements");
    const CallKey key = agreed_key(CallKind::Reduce, n, mpi_datatype(dtype), mpi_op(op), root);
    return checked("reduce", key, [&]() -> std::unique_ptr<NativeRequest> {
      auto r = start("reduce");
      const void* send = (rank_ == root && in == out) ? MPI_IN_PLACE : in;
      check_started(*r, MPI_Ireduce(send, rank_ == root ? out : nullptr, n, mpi_datatype(dtype),
                                    mpi_op(op), root, comms_->coll, r->pending().handle()),
                    "MPI_Ireduce");
      return r;
    });
  }

  std::unique_ptr<NativeRequest> reduce_scatter(const void* in, void* out,
                                                const std::vector<size_t>& counts, DType dtype,
                                                ReduceOp op, NativePath& path) override {
    // Every rank has the same counts, so every rank makes the same call.
    if (std::all_of(counts.begin(), counts.end(), [&](size_t c) { return c == counts[0]; }))
      return reduce_scatter_equal(in, out, counts[0], dtype, op, path);
    const MPI_Datatype type = mpi_datatype(dtype);
    for (size_t c : counts) fit(c, "reduce_scatter", "elements");
    const CallKey key = split_key(CallKind::ReduceScatter, counts, type, mpi_op(op));
    if (path == NativePath::Persistent) path = NativePath::Exchange;  // none for block lists
    return checked("reduce_scatter", key, [&]() -> std::unique_ptr<NativeRequest> {
      if (path == NativePath::Exchange) {
        if (auto x = exchange_->reduce_scatter_v(in, out, counts, type, dtype_size(dtype),
                                                 mpi_op(op)))
          return x;
        path = NativePath::Call;
      }
      auto r = start("reduce_scatter");
      std::vector<int>& c = r->pending().ints(counts.size());
      for (size_t k = 0; k < counts.size(); ++k) c[k] = static_cast<int>(counts[k]);
      check_started(*r, MPI_Ireduce_scatter(in, out, c.data(), type, mpi_op(op), comms_->coll,
                                            r->pending().handle()),
                    "MPI_Ireduce_scatter");
      return r;
    });
  }

  std::unique_ptr<NativeRequest> broadcast(void* buf, size_t bytes, int root,
                                           NativePath& path) override {
    const int b = fit(bytes, "broadcast", "bytes");
    if (path == NativePath::Persistent) {
      if (auto p = persistent_->broadcast(buf, b, root)) return p;
      path = NativePath::Exchange;
    }
    const CallKey key = agreed_key(CallKind::Broadcast, b, MPI_BYTE, MPI_OP_NULL, root);
    return checked("broadcast", key, [&]() -> std::unique_ptr<NativeRequest> {
      if (path == NativePath::Exchange) {
        if (auto x = exchange_->broadcast(buf, bytes, root)) return x;
        path = NativePath::Call;
      }
      auto r = start("broadcast");
      check_started(*r, MPI_Ibcast(buf, b, MPI_BYTE, root, comms_->coll, r->pending().handle()),
                    "MPI_Ibcast");
      return r;
    });
  }

  std::unique_ptr<NativeRequest> all_gather(const void* in, void* out,
                                            const std::vector<size_t>& bytes,
                                            const std::vector<size_t>& offset,
                                            NativePath& path) override {
    // Every rank has the same block list, so every rank makes the same call.
    if (equal_contiguous(bytes, offset)) return all_gather_equal(in, out, bytes[0], path);
    for (size_t b : bytes) fit(b, "all_gather", "bytes");
    path = exchange_path(path);  // no persistent request for block lists
    if (path == NativePath::Call)  // MPI_Iallgatherv's displacements, refused before it starts
      for (size_t d : offset) fit(d, "all_gather", "bytes");
    const CallKey key = split_key(CallKind::AllGather, bytes, MPI_BYTE, MPI_OP_NULL);
    return checked("all_gather", key, [&]() -> std::unique_ptr<NativeRequest> {
      if (path == NativePath::Exchange) return exchange_->all_gather_v(in, out, bytes, offset);
      char* base = static_cast<char*>(out);
      const void* send = in == base + offset[rank_] ? MPI_IN_PLACE : in;
      auto r = start("all_gather");
      std::vector<int>& c = r->pending().ints(bytes.size());
      std::vector<int>& d = r->pending().ints(bytes.size());
      fill(c, bytes, "all_gather");
      fill(d, offset, "all_gather");
      check_started(*r, MPI_Iallgatherv(send, c[rank_], MPI_BYTE, out, c.data(), d.data(),
                                        MPI_BYTE, comms_->coll, r->pending().handle()),
                    "MPI_Iallgatherv");
      return r;
    });
  }

  std::unique_ptr<NativeRequest> all_to_all_single(const void* in,
                                                   std::span<const size_t> send_bytes,
                                                   std::span<const size_t> send_offset,
                                                   void* out,
                                                   std::span<const size_t> recv_bytes,
                                                   std::span<const size_t> recv_offset,
                                                   NativePath& path) override {
    // With split lists: the point-to-point path, or else always MPI_Ialltoallv, even when this
    // rank's blocks happen to be equal: another rank's may not be, and every rank must make the
    // same MPI call (all_to_all_equal is the form without split lists).
    const size_t n = send_bytes.size();
    for (size_t k = 0; k < n; ++k) {
      fit(send_bytes[k], "all_to_all_single", "bytes");
      fit(recv_bytes[k], "all_to_all_single", "bytes");
    }
    path = exchange_path(path);  // no persistent request for split lists
    if (path == NativePath::Exchange) {
      own_block_alike("all_to_all_single", send_bytes, recv_bytes);
    } else {  // MPI_Ialltoallv's displacements (refused before anything starts)
      for (size_t k = 0; k < n; ++k) {
        fit(send_offset[k], "all_to_all_single", "bytes");
        fit(recv_offset[k], "all_to_all_single", "bytes");
      }
    }
    const CallKey key = all_to_all_key(rank_, n, send_bytes.data(), recv_bytes.data());
    return checked("all_to_all_single", key, [&]() -> std::unique_ptr<NativeRequest> {
      if (path == NativePath::Exchange) {
        SmallVector<const void*, 8> send;
        SmallVector<void*, 8> recv;
        for (size_t k = 0; k < n; ++k) {
          send.push_back(static_cast<const char*>(in) + send_offset[k]);
          recv.push_back(static_cast<char*>(out) + recv_offset[k]);
        }
        return exchange_->all_to_all_v("all_to_all_single", {send.begin(), n}, send_bytes,
                                       {recv.begin(), n}, recv_bytes);
      }
      auto r = start("all_to_all_single");
      std::vector<int>& sc = r->pending().ints(n);
      std::vector<int>& sd = r->pending().ints(n);
      std::vector<int>& rc = r->pending().ints(n);
      std::vector<int>& rd = r->pending().ints(n);
      fill(sc, send_bytes, "all_to_all_single");
      fill(sd, send_offset, "all_to_all_single");
      fill(rc, recv_bytes, "all_to_all_single");
      fill(rd, recv_offset, "all_to_all_single");
      check_started(*r, MPI_Ialltoallv(in, sc.data(), sd.data(), MPI_BYTE, out, rc.data(),
                                       rd.data(), MPI_BYTE, comms_->coll, r->pending().handle()),
                    "MPI_Ialltoallv");
      return r;
    });
  }

  std::unique_ptr<NativeRequest> all_to_all(const std::vector<const void*>& send,
                                            const std::vector<size_t>& send_bytes,
                                            const std::vector<void*>& recv,
                                            const std::vector<size_t>& recv_bytes,
                                            NativePath& path) override {
    for (size_t k = 0; k < send.size(); ++k) {
      fit(send_bytes[k], "all_to_all", "bytes");
      fit(recv_bytes[k], "all_to_all", "bytes");
    }
    path = exchange_path(path);  // no persistent request for lists
    if (path == NativePath::Exchange) own_block_alike("all_to_all", send_bytes, recv_bytes);
    const CallKey key = all_to_all_key(rank_, send_bytes, recv_bytes);
    return checked("all_to_all", key, [&]() -> std::unique_ptr<NativeRequest> {
      if (path == NativePath::Exchange)
        return exchange_->all_to_all_v("all_to_all", send, send_bytes, recv, recv_bytes);
      auto r = start("all_to_all");
      start_lists_by_address(r->pending(), comms_->coll, size_, send, send_bytes, recv,
                           recv_bytes, "all_to_all");
      return r;
    });
  }

  std::unique_ptr<NativeRequest> all_to_all_spans(SpanLists send, SpanLists recv,
                                                  NativePath& path) override {
    const size_t n = static_cast<size_t>(size_);
    for (SpanLists lists : {send, recv})
      for (const ByteSpan& span : std::span(lists.at, n * lists.parts))
        fit(span.bytes, "all_to_all_single", "bytes");
    path = exchange_path(path);  // no persistent request for spans
    // Refused before the key check is posted (as the point-to-point path would).
    FERRY_CHECK(path != NativePath::Exchange || !own_spans_differ(send, recv, rank_),
                InvalidArgument,
                "all_to_all_single on group ", id_, " rank ", rank_,
                ": the spans this rank keeps must be the same sizes both ways");
    // Compared by each peer's total: MPI_Ialltoallw's datatypes carry no more, and the
    // point-to-point path checks each span's message.
    SmallVector<size_t, 8> send_total, recv_total;
    send_total.resize(n);
    recv_total.resize(n);
    for (size_t k = 0; k < n; ++k) {
      for (const ByteSpan& span : std::span(send.of(k), send.parts)) send_total[k] += span.bytes;
      for (const ByteSpan& span : std::span(recv.of(k), recv.parts)) recv_total[k] += span.bytes;
    }
    return checked("all_to_all_single",
                   all_to_all_key(rank_, n, send_total.begin(), recv_total.begin()),
                   [&]() -> std::unique_ptr<NativeRequest> {
                     return all_to_all_spans_unchecked(send, recv, path);
                   });
  }

  std::unique_ptr<NativeRequest> all_to_all_spans_unchecked(SpanLists send, SpanLists recv,
                                                            NativePath path) {
    if (path == NativePath::Exchange) return exchange_->all_to_all_spans(send, recv);
    // MPI_Ialltoallw over MPI_BOTTOM, one datatype per peer covering its spans. MPI then
    // compares only a peer's total, not each span's size (the exchange path compares each).
    auto r = start("all_to_all_single");
    const size_t n = static_cast<size_t>(size_);
    std::vector<int>& sc = r->pending().ints(n);
    std::vector<int>& rc = r->pending().ints(n);
    std::vector<int>& zeros = r->pending().ints(n);
    std::vector<MPI_Datatype>& st = r->pending().datatypes(n, MPI_BYTE);
    std::vector<MPI_Datatype>& rt = r->pending().datatypes(n, MPI_BYTE);
    const std::string where = r->pending().describe();
    for (size_t k = 0; k < n; ++k) {
      if (MPI_Datatype t = absolute_spans(send.of(k), send.parts, where);
          t != MPI_DATATYPE_NULL) {
        st[k] = t;
        sc[k] = 1;
      }
      if (MPI_Datatype t = absolute_spans(recv.of(k), recv.parts, where);
          t != MPI_DATATYPE_NULL) {
        rt[k] = t;
        rc[k] = 1;
      }
    }
    check_started(*r, MPI_Ialltoallw(MPI_BOTTOM, sc.data(), zeros.data(), st.data(), MPI_BOTTOM,
                                     rc.data(), zeros.data(), rt.data(), comms_->coll,
                                     r->pending().handle()),
                  "MPI_Ialltoallw");
    return r;
  }

  std::unique_ptr<NativeRequest> gather(const void* in, size_t bytes,
                                        const std::vector<void*>& recv,
                                        const std::vector<size_t>& recv_bytes,
                                        int root) override {
    const int b = fit(bytes, "gather", "bytes");
    if (rank_ == root)
      for (size_t k : recv_bytes) fit(k, "gather", "bytes");
    const CallKey key =
        rooted_key(CallKind::Gather, bytes, rank_ == root ? &recv_bytes : nullptr, root);
    return checked("gather", key,
                   [&] { return gather_unchecked(in, b, bytes, recv, recv_bytes, root); },
                   rank_ == root ? recv_bytes : std::vector<size_t>{});
  }

  std::unique_ptr<NativeRequest> gather_unchecked(const void* in, int b, size_t bytes,
                                                  const std::vector<void*>& recv,
                                                  const std::vector<size_t>& recv_bytes,
                                                  int root) {
    auto r = start("gather");
    if (rank_ != root) {
      check_started(*r, MPI_Igatherv(in, b, MPI_BYTE, nullptr, nullptr, nullptr, MPI_BYTE, root,
                                     comms_->coll, r->pending().handle()),
                    "MPI_Igatherv");
      return r;
    }
    std::vector<int>& c = r->pending().ints(recv.size());
    std::vector<int>& d = r->pending().ints(recv.size());
    char* base = nullptr;
    if (displacements_from_lowest(recv, recv_bytes, c, d, base, "gather")) {
      const void* send = in == recv[static_cast<size_t>(root)] ? MPI_IN_PLACE : in;
      check_started(*r, MPI_Igatherv(send, b, MPI_BYTE, base, c.data(), d.data(), MPI_BYTE, root,
                                     comms_->coll, r->pending().handle()),
                    "MPI_Igatherv");
      return r;
    }
    // Outputs spread over more than 2 GiB of addresses: receive by absolute address instead.
    std::vector<const void*> send(recv.size(), nullptr);
    std::vector<size_t> send_bytes(recv.size(), 0);
    send[static_cast<size_t>(root)] = in;
    send_bytes[static_cast<size_t>(root)] = bytes;
    start_lists_by_address(r->pending(), comms_->coll, size_, send, send_bytes, recv,
                           recv_bytes, "gather");
    return r;
  }

  std::unique_ptr<NativeRequest> scatter(const std::vector<const void*>& send,
                                         const std::vector<size_t>& send_bytes, void* out,
                                         size_t bytes, int root) override {
    const int b = fit(bytes, "scatter", "bytes");
    if (rank_ == root)
      for (size_t k : send_bytes) fit(k, "scatter", "bytes");
    const CallKey key =
        rooted_key(CallKind::Scatter, bytes, rank_ == root ? &send_bytes : nullptr, root);
    return checked("scatter", key,
                   [&] { return scatter_unchecked(send, send_bytes, out, b, bytes, root); },
                   rank_ == root ? send_bytes : std::vector<size_t>{});
  }

  std::unique_ptr<NativeRequest> scatter_unchecked(const std::vector<const void*>& send,
                                                   const std::vector<size_t>& send_bytes,
                                                   void* out, int b, size_t bytes, int root) {
    auto r = start("scatter");
    if (rank_ != root) {
      check_started(*r, MPI_Iscatterv(nullptr, nullptr, nullptr, MPI_BYTE, out, b, MPI_BYTE,
                                      root, comms_->coll, r->pending().handle()),
                    "MPI_Iscatterv");
      return r;
    }
    std::vector<int>& c = r->pending().ints(send.size());
    std::vector<int>& d = r->pending().ints(send.size());
    char* base = nullptr;
    std::vector<void*> as_mutable(send.size());
    for (size_t k = 0; k < send.size(); ++k) as_mutable[k] = const_cast<void*>(send[k]);
    if (displacements_from_lowest(as_mutable, send_bytes, c, d, base, "scatter")) {
      void* recv = out == send[static_cast<size_t>(root)] ? MPI_IN_PLACE : out;
      check_started(*r, MPI_Iscatterv(base, c.data(), d.data(), MPI_BYTE, recv, b, MPI_BYTE, root,
                                      comms_->coll, r->pending().handle()),
                    "MPI_Iscatterv");
      return r;
    }
    std::vector<void*> recv(send.size(), nullptr);
    std::vector<size_t> recv_bytes(send.size(), 0);
    recv[static_cast<size_t>(root)] = out;
    recv_bytes[static_cast<size_t>(root)] = bytes;
    start_lists_by_address(r->pending(), comms_->coll, size_, send, send_bytes, recv,
                           recv_bytes, "scatter");
    return r;
  }

  std::unique_ptr<NativeRequest> barrier(NativePath& path) override {
    if (path == NativePath::Persistent) {
      if (auto p = persistent_->barrier()) return p;
    }
    path = NativePath::Call;  // no exchange for a barrier
    const CallKey key = agreed_key(CallKind::Barrier, 0, MPI_BYTE, MPI_OP_NULL, -1);
    return checked("barrier", key, [&]() -> std::unique_ptr<NativeRequest> {
      auto r = start("barrier");
      check_started(*r, MPI_Ibarrier(comms_->coll, r->pending().handle()), "MPI_Ibarrier");
      return r;
    });
  }

  std::unique_ptr<NativeRequest> all_gather_equal(const void* in, void* out,
                                                  size_t block_bytes, NativePath& path) override {
    const int b = fit(block_bytes, "all_gather", "bytes");
    // The persistent request before point to point where both take the op: it compares its key
    // once, where the point-to-point path needs the per-call key check. Unchecked, point to
    // point was the cheaper (8 B on two ranks: 0.7-1.2 us added to the blocking call against
    // 1.1-2.5 us); with the check beside it, it took 3.1-5.4 us against 1.3-1.5 us before the
    // check (ferry-bench, alternated runs).
    if (path == NativePath::Persistent) {
      if (auto p = persistent_->all_gather(in, out, b)) return p;
      path = NativePath::Exchange;
    }
    const CallKey key = agreed_key(CallKind::AllGather, b, MPI_BYTE, MPI_OP_NULL, -1);
    return checked("all_gather", key, [&]() -> std::unique_ptr<NativeRequest> {
      if (path == NativePath::Exchange) {
        if (auto x = exchange_->all_gather(in, out, block_bytes)) return x;
        path = NativePath::Call;
      }
      auto r = start("all_gather");
      const void* send =
          in == static_cast<char*>(out) + block_bytes * static_cast<size_t>(rank_) ? MPI_IN_PLACE
                                                                                   : in;
      check_started(*r, MPI_Iallgather(send, b, MPI_BYTE, out, b, MPI_BYTE, comms_->coll,
                                       r->pending().handle()),
                    "MPI_Iallgather");
      return r;
    });
  }

  std::unique_ptr<NativeRequest> reduce_scatter_equal(const void* in, void* out, size_t count,
                                                      DType dtype, ReduceOp op,
                                                      NativePath& path) override {
    const int n = fit(count, "reduce_scatter", "elements");
    const MPI_Datatype type = mpi_datatype(dtype);
    if (path == NativePath::Persistent) {
      if (auto p = persistent_->reduce_scatter(in, out, n, type, dtype_size(dtype), mpi_op(op)))
        return p;
      path = NativePath::Exchange;
    }
    const CallKey key = agreed_key(CallKind::ReduceScatter, n, type, mpi_op(op), -1);
    return checked("reduce_scatter", key, [&]() -> std::unique_ptr<NativeRequest> {
      return reduce_scatter_equal_unchecked(in, out, count, n, type, dtype_size(dtype),
                                            mpi_op(op), path);
    });
  }

  std::unique_ptr<NativeRequest> reduce_scatter_equal_unchecked(const void* in, void* out,
                                                                size_t count, int n,
                                                                MPI_Datatype type,
                                                                size_t element_bytes, MPI_Op op,
                                                                NativePath& path) {
    if (path == NativePath::Exchange) {
      if (auto x = exchange_->reduce_scatter(in, out, count, type, element_bytes, op)) return x;
      path = NativePath::Call;
    }
    // MPI_Ireduce_scatter with equal counts rather than MPI_Ireduce_scatter_block: MPICH 4.0.2
    // picks a slow algorithm for the latter (2 ranks, 1 MiB: 920 us against 120 us for the
    // former and for the blocking call; the same at 64 KiB and 4 MiB).
    auto r = start("reduce_scatter");
    std::vector<int>& c = r->pending().ints(static_cast<size_t>(size_));
    std::fill(c.begin(), c.end(), n);
    check_started(*r, MPI_Ireduce_scatter(in, out, c.data(), type, op, comms_->coll,
                                          r->pending().handle()),
                  "MPI_Ireduce_scatter");
    return r;
  }

  std::unique_ptr<NativeRequest> all_to_all_equal(const void* in, void* out, size_t block_bytes,
                                                  NativePath& path) override {
    const int b = fit(block_bytes, "all_to_all_single", "bytes");
    // The persistent request before point to point, as for all_gather (unchecked, point to
    // point was the cheaper at 8 B on two ranks: 0.6-1.2 us added against 0.9-1.9 us).
    if (path == NativePath::Persistent) {
      if (auto p = persistent_->all_to_all(in, out, b)) return p;
      path = NativePath::Exchange;
    }
    return checked("all_to_all_single", all_to_all_key(rank_, size_, block_bytes),
                   [&]() -> std::unique_ptr<NativeRequest> {
                     if (path == NativePath::Exchange) {
                       if (auto x = exchange_->all_to_all(in, out, block_bytes)) return x;
                       path = NativePath::Call;
                     }
                     auto r = start("all_to_all_single");
                     check_started(*r, MPI_Ialltoall(in, b, MPI_BYTE, out, b, MPI_BYTE,
                                                     comms_->coll, r->pending().handle()),
                                   "MPI_Ialltoall");
                     return r;
                   });
  }

  std::shared_ptr<NativeCollectives> split(int color, int key, uint32_t group_id) override {
    const std::string where = str("the split of group ", id_, " into group ", group_id);
    MPI_Comm comm = MPI_COMM_NULL;
    // MPI orders the new communicator by (key, rank here), exactly as Group::split orders the
    // members, so group rank and communicator rank agree.
    check_mpi(MPI_Comm_split(comms_->side, color < 0 ? MPI_UNDEFINED : color, key, &comm),
              "MPI_Comm_split", where);
    if (comm == MPI_COMM_NULL) return nullptr;
    check_mpi(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler",
              where);
    MPI_Comm side = MPI_COMM_NULL;
    const int code = MPI_Comm_dup(comm, &side);
    if (code != MPI_SUCCESS) MPI_Comm_free(&comm);
    check_mpi(code, "MPI_Comm_dup", where);
    MPI_Comm_set_errhandler(side, MPI_ERRORS_RETURN);
    return make_mpi_collectives(
        world_, group_id,
        std::make_shared<MpiGroupComms>(comm, side, world_->world_ranks_of(comm), world_->size()));
  }

  void abandon_stuck_request(std::unique_ptr<NativeRequest> request) override {
    comms_->stuck.store(true);
    give_up_exchange(*request);
    keep_forever(std::shared_ptr<NativeRequest>(std::move(request)));
  }

 private:
  // The op that `start_op` starts, with its key compared across the ranks in flight beside it
  // (mpi_call_key.h): for every path but a persistent request, which compares its key once.
  // The comparison is posted first, so that ranks whose calls differ in the path they take
  // still compare with each other. Anything that refuses the call outright (InvalidArgument)
  // must have done so before: the comparison, once posted, is a collective call of the group.
  template <class Start>
  std::unique_ptr<NativeRequest> checked(const char* op, const CallKey& key, Start&& start_op,
                                         std::vector<size_t> expected = {}) {
    auto check = make_pooled<KeyCheck>(comms_->coll, rank_, size_, id_, op, key,
                                            std::move(expected));
    std::unique_ptr<NativeRequest> request;
    try {
      check->post();
      request = start_op();
    } catch (...) {
      keep_forever(std::move(check));  // MPI owns its buffers until it finishes
      throw;
    }
    return std::make_unique<CheckedRequest>(std::move(check), std::move(request), comms_);
  }

  // The way a form without a persistent request takes: the exchange where this group has it
  // and the table did not ask for MPI's call, else MPI's call. Decided before anything is
  // posted, as the forms' checks differ by way.
  NativePath exchange_path(NativePath asked) const {
    return asked != NativePath::Call && exchange_->enabled() ? NativePath::Exchange
                                                             : NativePath::Call;
  }

  // The point-to-point path copies this rank's own block: it must be the same size both ways.
  void own_block_alike(const char* op, std::span<const size_t> send_bytes,
                       std::span<const size_t> recv_bytes) const {
    const size_t me = static_cast<size_t>(rank_);
    FERRY_CHECK(send_bytes[me] == recv_bytes[me], InvalidArgument, op, " on group ", id_,
                " rank ", rank_, ": the block this rank keeps must be the same size both ways, ",
                "given ", send_bytes[me], " bytes to send and ", recv_bytes[me], " to receive");
  }

  std::unique_ptr<MpiCollectiveRequest> start(const char* op) {
    return std::make_unique<MpiCollectiveRequest>(op, id_);
  }

  void check_started(MpiCollectiveRequest& r, int code, const char* call) {
    if (code != MPI_SUCCESS) check_mpi(code, call, r.pending().describe());  // named on failure only
  }

  int fit(size_t n, const char* op, const char* unit) const { return fit_mpi_int(n, op, unit); }

  void fill(std::vector<int>& to, std::span<const size_t> from, const char* op) const {
    for (size_t k = 0; k < from.size(); ++k) to[k] = fit(from[k], op, "bytes");
  }

  static bool equal_contiguous(const std::vector<size_t>& bytes,
                               const std::vector<size_t>& offset) {
    for (size_t k = 0; k < bytes.size(); ++k)
      if (bytes[k] != bytes[0] || offset[k] != k * bytes[0]) return false;
    return true;
  }

  std::shared_ptr<MpiWorld> world_;
  uint32_t id_;
  std::shared_ptr<MpiGroupComms> comms_;
  int rank_ = 0;
  int size_ = 0;
  std::unique_ptr<ExchangeCollectives> exchange_;
  // Declared last, so destroyed first: its requests are freed while the communicator lives.
  std::unique_ptr<PersistentCollectives> persistent_;
};

}  // namespace

std::shared_ptr<NativeCollectives> make_mpi_collectives(std::shared_ptr<MpiWorld> world,
                                                        uint32_t group_id,
                                                        std::shared_ptr<MpiGroupComms> comms) {
  return std::make_shared<MpiCollectives>(std::move(world), group_id, std::move(comms));
}

}  // namespace ferry::detail
