#include "backends/mpi/mpi_exchange.h"

#include "backends/mpi/mpi_error.h"
#include "backends/mpi/mpi_request.h"
#include "backends/mpi/mpi_wait.h"
#include "runtime/block_cache.h"
#include "runtime/error.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace ferry::detail {
namespace {

constexpr int kFirstTag = 1 << 25;  // above every tag OpContext's algorithms use
constexpr int64_t kMinTags = int64_t{1} << 20;

// Scratch for received payloads; from the block cache, as large tensors are, so a large op
// does not page-fault fresh memory every time.
class Scratch {
 public:
  Scratch() = default;
  explicit Scratch(size_t bytes) : bytes_(bytes), data_(bytes ? acquire_block(bytes) : nullptr) {}
  ~Scratch() {
    if (data_) release_block(data_, bytes_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  Scratch(Scratch&& o) noexcept { *this = std::move(o); }
  Scratch& operator=(Scratch&& o) noexcept {
    std::swap(bytes_, o.bytes_);
    std::swap(data_, o.data_);
    return *this;
  }
  char* data() const { return static_cast<char*>(data_); }

 private:
  size_t bytes_ = 0;
  void* data_ = nullptr;
};

// What a request MPI may still use after ferry gave it up: kept until the process ends.
struct Abandoned {
  std::vector<MPI_Request> requests;
  Scratch scratch;
};

// The reduction that follows the messages: acc = sources[i] op acc for each source in order
// (acc already holds the first operand), then acc is copied to copy_to if that is set.
struct Fold {
  char* acc = nullptr;
  std::vector<const char*> sources;
  char* copy_to = nullptr;
  size_t count = 0;
  MPI_Datatype type = MPI_BYTE;
  size_t element_bytes = 1;
  MPI_Op op = MPI_OP_NULL;
};

// One op of this path: its posted messages, and the fold (if any) that runs on the thread that
// sees them finish.
class ExchangeRequest final : public NativeRequest {
 public:
  ExchangeRequest(const char* op, uint32_t group_id, MPI_Comm comm, int tag, int ranks)
      : op_(op), group_id_(group_id), comm_(comm), tag_(tag) {
    requests_.reserve(2 * static_cast<size_t>(ranks - 1));
    messages_.reserve(2 * static_cast<size_t>(ranks - 1));
  }

  ~ExchangeRequest() override {
    // The engine drops a request once it finished, or hands it to keep_forever when its op
    // timed out; one still posted here must not let MPI write into freed memory.
    if (!requests_.empty()) abandon();
  }

  // `bytes` of scratch that live as long as the request (and longer if it is abandoned).
  char* scratch(size_t bytes) {
    scratch_ = Scratch(bytes);
    return scratch_.data();
  }

  // Posts one message; zero elements post nothing (the peer posts nothing either).
  void send(const void* buf, size_t count, MPI_Datatype type, int peer) {
    if (count == 0) return;
    requests_.push_back(MPI_REQUEST_NULL);
    messages_.push_back({peer, static_cast<int>(count), type, false});
    post(MPI_Isend(buf, static_cast<int>(count), type, peer, tag_, comm_, &requests_.back()),
         "MPI_Isend");
  }
  void recv(void* buf, size_t count, MPI_Datatype type, int peer) {
    if (count == 0) return;
    requests_.push_back(MPI_REQUEST_NULL);
    messages_.push_back({peer, static_cast<int>(count), type, true});
    post(MPI_Irecv(buf, static_cast<int>(count), type, peer, tag_, comm_, &requests_.back()),
         "MPI_Irecv");
  }

  void then_fold(Fold fold) { fold_ = std::move(fold); }

  bool test() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return true;
    if (!mpi_usable()) {  // MPI_Testall after MPI_Finalize is an error MPI cannot even report
      finish(TransportError(str("ferry: ", describe(), " was still pending when MPI was finalized")));
      return true;
    }
    int flag = 0;
    statuses_.resize(requests_.size());
    const int code = MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag,
                                 statuses_.data());
    if (code != MPI_SUCCESS) {
      finish(TransportError(str("ferry: ", describe(), " failed in MPI: ", mpi_error_string(code))));
      return true;
    }
    if (!flag) return false;
    requests_.clear();
    try {
      check_received_sizes();
      if (fold_.acc != nullptr) run_fold();
      done_ = true;
    } catch (...) {
      error_ = std::current_exception();
      done_ = true;
    }
    return true;
  }

  bool wait_until(Clock::time_point deadline) override {
    return wait_polling_mpi([this] { return test(); }, first_wait_, deadline);
  }

  void rethrow_if_failed() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  struct Message {
    int peer;
    int count;
    MPI_Datatype type;
    bool is_recv;
  };

  std::string describe() const { return str(op_, " on group ", group_id_); }

  void post(int code, const char* call) {
    if (code == MPI_SUCCESS) return;
    requests_.pop_back();
    messages_.pop_back();
    abandon();
    check_mpi(code, call, describe());
  }

  // Gives up what is posted: receives are cancelled (when MPI is still usable), and the handles
  // and the scratch stay alive until the process ends, since MPI may still write into them.
  void abandon() {
    if (mpi_usable()) {
      for (size_t i = 0; i < requests_.size(); ++i)
        if (requests_[i] != MPI_REQUEST_NULL && messages_[i].is_recv) MPI_Cancel(&requests_[i]);
    }
    auto kept = std::make_shared<Abandoned>();
    kept->requests = std::move(requests_);
    kept->scratch = std::move(scratch_);
    keep_forever(std::move(kept));
    requests_.clear();
  }

  void finish(const TransportError& e) {
    if (!requests_.empty()) abandon();
    error_ = std::make_exception_ptr(e);
    done_ = true;
  }

  // MPI accepts a shorter message into a larger receive; a peer that sent a different size
  // called with different sizes.
  void check_received_sizes() const {
    for (size_t i = 0; i < messages_.size(); ++i) {
      const Message& m = messages_[i];
      if (!m.is_recv) continue;
      int got = 0;
      MPI_Get_count(&statuses_[i], m.type, &got);
      if (got != m.count)
        throw MismatchError(str("ferry: ", describe(), ": rank ", m.peer, " sent ", got,
                                " elements where this rank expected ", m.count,
                                ": the ranks called with different sizes"));
    }
  }

  void run_fold() {
    for (const char* source : fold_.sources) {
      const int code = MPI_Reduce_local(source, fold_.acc, static_cast<int>(fold_.count),
                                        fold_.type, fold_.op);
      check_mpi(code, "MPI_Reduce_local", describe());
    }
    if (fold_.copy_to != nullptr && fold_.count > 0)
      std::memcpy(fold_.copy_to, fold_.acc, fold_.count * fold_.element_bytes);
  }

  const char* op_;
  uint32_t group_id_;
  MPI_Comm comm_;
  int tag_;

  std::mutex mu_;
  std::vector<MPI_Request> requests_;  // until they finished
  std::vector<Message> messages_;      // one per request, in the same order
  std::vector<MPI_Status> statuses_;
  Scratch scratch_;
  Fold fold_;
  bool done_ = false;
  std::exception_ptr error_;
  Clock::time_point first_wait_{};
};

bool exchange_enabled() {
  const char* v = std::getenv("FERRY_MPI_EXCHANGE");
  return v == nullptr || std::string(v) != "0";
}

}  // namespace

ExchangeCollectives::ExchangeCollectives(MPI_Comm comm, int rank, int size, uint32_t group_id,
                                         int tag_ub)
    : comm_(comm), rank_(rank), size_(size), group_id_(group_id) {
  const int64_t available = static_cast<int64_t>(tag_ub) - kFirstTag + 1;
  tag_span_ = static_cast<int>(std::max<int64_t>(available, 0));
  enabled_ = exchange_enabled() && size >= 2 && size <= kMaxRanks && available >= kMinTags;
}

int ExchangeCollectives::tag_for_next_op() {
  const uint64_t n = next_op_++;
  return kFirstTag + static_cast<int>(n % static_cast<uint64_t>(tag_span_));
}

std::unique_ptr<NativeRequest> ExchangeCollectives::all_reduce(const void* in, void* out,
                                                               size_t count, MPI_Datatype type,
                                                               size_t element_bytes,
                                                               MPI_Op op) {
  const size_t bytes = count * element_bytes;
  const size_t peers = static_cast<size_t>(size_ - 1);
  if (!enabled_ || bytes * peers > kMaxAllReduceBytes) return nullptr;
  auto r = std::make_unique<ExchangeRequest>("all_reduce", group_id_, comm_, tag_for_next_op(),
                                             size_);
  // The other ranks' payloads, in rank order.
  char* received = r->scratch(peers * bytes);
  auto slot = [&](int k) { return received + static_cast<size_t>(k < rank_ ? k : k - 1) * bytes; };
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->recv(slot(p), count, type, p);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->send(src, count, type, p);
  // Every rank folds the payloads in rank order, starting from rank 0's, into a buffer that
  // holds no payload still needed: the output on rank 0 (its own input is rank 0's payload),
  // rank 0's received payload elsewhere (the output may be this rank's input), copied out last.
  Fold f;
  f.count = count;
  f.type = type;
  f.element_bytes = element_bytes;
  f.op = op;
  if (rank_ == 0) {
    if (src != dst && bytes > 0) std::memcpy(dst, src, bytes);  // the sends only read `in`
    f.acc = dst;
  } else {
    f.acc = slot(0);
    f.copy_to = dst;
  }
  for (int k = 1; k < size_; ++k) f.sources.push_back(k == rank_ ? src : slot(k));
  r->then_fold(std::move(f));
  return r;
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
  auto r = std::make_unique<ExchangeRequest>("reduce_scatter", group_id_, comm_,
                                             tag_for_next_op(), size_);
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
  return r;
}

std::unique_ptr<NativeRequest> ExchangeCollectives::broadcast(void* buf, size_t bytes, int root) {
  if (!enabled_ || size_ != 2) return nullptr;
  auto r = std::make_unique<ExchangeRequest>("broadcast", group_id_, comm_, tag_for_next_op(),
                                             size_);
  const size_t pieces = bytes >= kPiecewiseBroadcastBytes ? 4 : 1;
  char* data = static_cast<char*>(buf);
  for (size_t i = 0; i < pieces; ++i) {
    const size_t begin = bytes * i / pieces, end = bytes * (i + 1) / pieces;
    if (rank_ == root)
      r->send(data + begin, end - begin, MPI_BYTE, 1 - root);
    else
      r->recv(data + begin, end - begin, MPI_BYTE, root);
  }
  return r;
}

std::unique_ptr<NativeRequest> ExchangeCollectives::all_gather(const void* in, void* out,
                                                               size_t block) {
  if (!enabled_) return nullptr;
  auto r = std::make_unique<ExchangeRequest>("all_gather", group_id_, comm_, tag_for_next_op(),
                                             size_);
  char* dst = static_cast<char*>(out);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->recv(dst + static_cast<size_t>(p) * block, block, MPI_BYTE, p);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->send(in, block, MPI_BYTE, p);
  char* mine = dst + static_cast<size_t>(rank_) * block;
  if (in != mine && block > 0) std::memcpy(mine, in, block);
  return r;
}

std::unique_ptr<NativeRequest> ExchangeCollectives::all_to_all(const void* in, void* out,
                                                               size_t block) {
  if (!enabled_) return nullptr;
  auto r = std::make_unique<ExchangeRequest>("all_to_all_single", group_id_, comm_,
                                             tag_for_next_op(), size_);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->recv(dst + static_cast<size_t>(p) * block, block, MPI_BYTE, p);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->send(src + static_cast<size_t>(p) * block, block, MPI_BYTE, p);
  const size_t mine = static_cast<size_t>(rank_) * block;
  if (block > 0) std::memcpy(dst + mine, src + mine, block);
  return r;
}

std::unique_ptr<NativeRequest> ExchangeCollectives::all_gather_v(const void* in, void* out,
                                                                 const std::vector<size_t>& bytes,
                                                                 const std::vector<size_t>& offset) {
  if (!enabled_) return nullptr;
  auto r = std::make_unique<ExchangeRequest>("all_gather", group_id_, comm_, tag_for_next_op(),
                                             size_);
  char* dst = static_cast<char*>(out);
  const size_t me = static_cast<size_t>(rank_);
  for (int p = 0; p < size_; ++p) {
    const size_t k = static_cast<size_t>(p);
    if (p != rank_) r->recv(dst + offset[k], bytes[k], MPI_BYTE, p);
  }
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->send(in, bytes[me], MPI_BYTE, p);
  if (in != dst + offset[me] && bytes[me] > 0) std::memcpy(dst + offset[me], in, bytes[me]);
  return r;
}

std::unique_ptr<NativeRequest> ExchangeCollectives::all_to_all_v(
    const char* op, const std::vector<const void*>& send, const std::vector<size_t>& send_bytes,
    const std::vector<void*>& recv, const std::vector<size_t>& recv_bytes) {
  if (!enabled_) return nullptr;
  const size_t me = static_cast<size_t>(rank_);
  FERRY_CHECK(send_bytes[me] == recv_bytes[me], InvalidArgument, op, " on group ", group_id_,
              " rank ", rank_, ": the block this rank keeps must be the same size both ways, ",
              "given ", send_bytes[me], " bytes to send and ", recv_bytes[me], " to receive");
  auto r = std::make_unique<ExchangeRequest>(op, group_id_, comm_, tag_for_next_op(), size_);
  for (int p = 0; p < size_; ++p) {
    const size_t k = static_cast<size_t>(p);
    if (p != rank_) r->recv(recv[k], recv_bytes[k], MPI_BYTE, p);
  }
  for (int p = 0; p < size_; ++p) {
    const size_t k = static_cast<size_t>(p);
    if (p != rank_) r->send(send[k], send_bytes[k], MPI_BYTE, p);
  }
  if (send_bytes[me] > 0) std::memcpy(recv[me], send[me], send_bytes[me]);
  return r;
}

}  // namespace ferry::detail
