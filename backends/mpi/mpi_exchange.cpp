#include <ferry/backends/mpi/mpi_exchange.h>

#include <ferry/backends/mpi/mpi_exchange_op.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/object_pool.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace ferry::detail {
namespace {

constexpr int kFirstTag = 1 << 25;  // above every tag OpContext's algorithms use
constexpr int64_t kMinTags = int64_t{1} << 20;

bool exchange_enabled() { return config().mpi_exchange; }

}  // namespace

ExchangeCollectives::ExchangeCollectives(MPI_Comm comm, int rank, int size, uint32_t group_id,
                                         int tag_ub)
    : comm_(comm), rank_(rank), size_(size), group_id_(group_id) {
  const int64_t available = static_cast<int64_t>(tag_ub) - kFirstTag + 1;
  tag_span_ = static_cast<int>(std::max<int64_t>(available, 0) & ~int64_t{1});
  enabled_ = exchange_enabled() && size >= 2 && size <= kMaxRanks && available >= kMinTags;
}

int ExchangeCollectives::tag_for_next_op() {
  const uint64_t n = next_op_++;
  return kFirstTag + static_cast<int>((2 * n) % static_cast<uint64_t>(tag_span_));
}

std::unique_ptr<NativeRequest> ExchangeCollectives::all_reduce(const void* in, void* out,
                                                               size_t count, MPI_Datatype type,
                                                               size_t element_bytes,
                                                               MPI_Op op) {
  if (!enabled_) return nullptr;
  auto x = make_pooled<MpiExchange>("all_reduce", group_id_, comm_, tag_for_next_op(), rank_,
                                      size_);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  const size_t my_count = block_count(count, size_, rank_);
  const size_t my_bytes = my_count * element_bytes;
  const size_t mine = block_offset(count, size_, rank_) * element_bytes;
  char* received = x->scratch(static_cast<size_t>(size_ - 1) * my_bytes);
  Fold f;
  f.acc = dst + mine;
  f.count = my_count;
  f.type = type;
  f.element_bytes = element_bytes;
  f.op = op;
  int slot = 0;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    char* block = received + static_cast<size_t>(slot++) * my_bytes;
    x->recv(block, my_count, type, p);
    f.sources.push_back(block);
  }
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    x->send(src + block_offset(count, size_, p) * element_bytes, block_count(count, size_, p),
            type, p);
  }
  // This rank's own block starts the fold; the sends above never read it.
  if (src != dst && my_bytes > 0) std::memcpy(dst + mine, src + mine, my_bytes);
  x->then_fold(std::move(f));
  x->then_all_gather(dst, count);
  return exchange_request(std::move(x));
}

std::unique_ptr<NativeRequest> ExchangeCollectives::reduce_scatter(const void* in, void* out,
                                                                   size_t count,
                                                                   MPI_Datatype type,
                                                                   size_t element_bytes,
                                                                   MPI_Op op) {
  if (!enabled_) return nullptr;
  return reduce_scatter_v(in, out, std::vector<size_t>(static_cast<size_t>(size_), count), type,
                          element_bytes, op);
}

std::unique_ptr<NativeRequest> ExchangeCollectives::reduce_scatter_v(
    const void* in, void* out, const std::vector<size_t>& counts, MPI_Datatype type,
    size_t element_bytes, MPI_Op op) {
  if (!enabled_) return nullptr;
  auto r = make_pooled<MpiExchange>("reduce_scatter", group_id_, comm_, tag_for_next_op(),
                                      rank_, size_);
  const char* src = static_cast<const char*>(in);
  const size_t my_count = counts[static_cast<size_t>(rank_)];
  const size_t my_bytes = my_count * element_bytes;
  char* received = r->scratch(static_cast<size_t>(size_ - 1) * my_bytes);
  Fold f;
  f.count = my_count;
  f.type = type;
  f.element_bytes = element_bytes;
  f.op = op;
  f.acc = static_cast<char*>(out);
  int slot = 0;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    char* block = received + static_cast<size_t>(slot++) * my_bytes;
    r->recv(block, my_count, type, p);
    f.sources.push_back(block);
  }
  size_t offset = 0, mine = 0;
  for (int p = 0; p < size_; ++p) {
    const size_t n = counts[static_cast<size_t>(p)];
    if (p == rank_)
      mine = offset;
    else
      r->send(src + offset * element_bytes, n, type, p);
    offset += n;
  }
  // This rank's block of its input starts the fold (`out` never overlaps `in`); only this rank
  // reduces this block, so the order of the others (rank order) is all that must be fixed.
  if (my_bytes > 0) std::memcpy(out, src + mine * element_bytes, my_bytes);
  r->then_fold(std::move(f));
  return exchange_request(std::move(r));
}

std::unique_ptr<NativeRequest> ExchangeCollectives::broadcast(void* buf, size_t bytes, int root) {
  if (!enabled_ || size_ != 2) return nullptr;
  auto r = make_pooled<MpiExchange>("broadcast", group_id_, comm_, tag_for_next_op(), rank_,
                                      size_);
  if (rank_ == root)
    r->send(buf, bytes, MPI_BYTE, 1 - root);
  else
    r->recv(buf, bytes, MPI_BYTE, root);
  return exchange_request(std::move(r));
}

std::unique_ptr<NativeRequest> ExchangeCollectives::all_gather(const void* in, void* out,
                                                               size_t block) {
  if (!enabled_) return nullptr;
  auto r = make_pooled<MpiExchange>("all_gather", group_id_, comm_, tag_for_next_op(),
                                         rank_, size_);
  char* dst = static_cast<char*>(out);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->recv(dst + static_cast<size_t>(p) * block, block, MPI_BYTE, p);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->send(in, block, MPI_BYTE, p);
  char* mine = dst + static_cast<size_t>(rank_) * block;
  if (in != mine && block > 0) std::memcpy(mine, in, block);
  return exchange_request(std::move(r));
}

std::unique_ptr<NativeRequest> ExchangeCollectives::all_to_all(const void* in, void* out,
                                                               size_t block) {
  if (!enabled_) return nullptr;
  auto r = make_pooled<MpiExchange>("all_to_all_single", group_id_, comm_, tag_for_next_op(),
                                      rank_, size_);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->recv(dst + static_cast<size_t>(p) * block, block, MPI_BYTE, p);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->send(src + static_cast<size_t>(p) * block, block, MPI_BYTE, p);
  const size_t mine = static_cast<size_t>(rank_) * block;
  if (block > 0) std::memcpy(dst + mine, src + mine, block);
  return exchange_request(std::move(r));
}

std::unique_ptr<NativeRequest> ExchangeCollectives::all_gather_v(const void* in, void* out,
                                                                 const std::vector<size_t>& bytes,
                                                                 const std::vector<size_t>& offset) {
  if (!enabled_) return nullptr;
  auto r = make_pooled<MpiExchange>("all_gather", group_id_, comm_, tag_for_next_op(),
                                         rank_, size_);
  char* dst = static_cast<char*>(out);
  const size_t me = static_cast<size_t>(rank_);
  for (int p = 0; p < size_; ++p) {
    const size_t k = static_cast<size_t>(p);
    if (p != rank_) r->recv(dst + offset[k], bytes[k], MPI_BYTE, p);
  }
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->send(in, bytes[me], MPI_BYTE, p);
  if (in != dst + offset[me] && bytes[me] > 0) std::memcpy(dst + offset[me], in, bytes[me]);
  return exchange_request(std::move(r));
}

std::unique_ptr<NativeRequest> ExchangeCollectives::all_to_all_v(
    const char* op, std::span<const void* const> send, std::span<const size_t> send_bytes,
    std::span<void* const> recv, std::span<const size_t> recv_bytes) {
  if (!enabled_) return nullptr;
  const size_t me = static_cast<size_t>(rank_);
  FERRY_CHECK(send_bytes[me] == recv_bytes[me], InvalidArgument, op, " on group ", group_id_,
              " rank ", rank_, ": the block this rank keeps must be the same size both ways, ",
              "given ", send_bytes[me], " bytes to send and ", recv_bytes[me], " to receive");
  auto r = make_pooled<MpiExchange>(op, group_id_, comm_, tag_for_next_op(), rank_, size_);
  for (int p = 0; p < size_; ++p) {
    const size_t k = static_cast<size_t>(p);
    if (p != rank_) r->recv(recv[k], recv_bytes[k], MPI_BYTE, p);
  }
  for (int p = 0; p < size_; ++p) {
    const size_t k = static_cast<size_t>(p);
    if (p != rank_) r->send(send[k], send_bytes[k], MPI_BYTE, p);
  }
  if (send_bytes[me] > 0) std::memcpy(recv[me], send[me], send_bytes[me]);
  return exchange_request(std::move(r));
}

std::unique_ptr<NativeRequest> ExchangeCollectives::all_to_all_spans(SpanLists send,
                                                                     SpanLists recv) {
  if (!enabled_) return nullptr;
  FERRY_CHECK(!own_spans_differ(send, recv, rank_), InvalidArgument, "all_to_all_single on group ", group_id_,
              " rank ", rank_, ": the spans this rank keeps must be the same sizes both ways");
  auto r = make_pooled<MpiExchange>("all_to_all_single", group_id_, comm_, tag_for_next_op(),
                                    rank_, size_);
  for (int p = 0; p < size_; ++p)
    if (p != rank_)
      for (size_t i = 0; i < recv.parts; ++i) {
        const ByteSpan& s = recv.of(static_cast<size_t>(p))[i];
        r->recv(s.data, s.bytes, MPI_BYTE, p, 0, /*post_empty=*/true);
      }
  for (int p = 0; p < size_; ++p)
    if (p != rank_)
      for (size_t i = 0; i < send.parts; ++i) {
        const ByteSpan& s = send.of(static_cast<size_t>(p))[i];
        r->send(s.data, s.bytes, MPI_BYTE, p, 0, /*post_empty=*/true);
      }
  const auto me = static_cast<size_t>(rank_);
  for (size_t i = 0; i < send.parts; ++i)
    if (send.of(me)[i].bytes > 0)
      std::memcpy(recv.of(me)[i].data, send.of(me)[i].data, send.of(me)[i].bytes);
  return exchange_request(std::move(r));
}

}  // namespace ferry::detail
