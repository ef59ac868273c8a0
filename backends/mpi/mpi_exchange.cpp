#include "backends/mpi/mpi_exchange.h"

#include "backends/mpi/mpi_error.h"
#include "backends/mpi/mpi_request.h"
#include "backends/mpi/mpi_wait.h"
#include "runtime/block_cache.h"
#include "runtime/error.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace ferry::detail {
namespace {

constexpr int kFirstTag = 1 << 25;  // above every tag OpContext's algorithms use

// When `count` elements split into `ranks` blocks, the first count % ranks one larger.
size_t block_count(size_t count, int ranks, int k) {
  const size_t w = static_cast<size_t>(ranks), kk = static_cast<size_t>(k);
  return count / w + (kk < count % w ? 1 : 0);
}
size_t block_offset(size_t count, int ranks, int k) {
  const size_t w = static_cast<size_t>(ranks), kk = static_cast<size_t>(k);
  return kk * (count / w) + std::min(kk, count % w);
}

// Scratch for received blocks; from the block cache, as large tensors are, so a 16 MiB
// all_reduce does not page-fault a fresh 8 MiB every time.
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

class ExchangeRequest;

// The all_reduces whose first round is pending (see "Progress" in the header). Its mutex is
// never held while waiting for a request's: it only try-locks them, so a thread that holds a
// request's lock and then takes this one cannot deadlock with it.
class PendingRounds {
 public:
  void add(ExchangeRequest* r);
  void remove(ExchangeRequest* r);  // idempotent
  void advance_all();
  bool empty() const { return count_.load(std::memory_order_relaxed) == 0; }

 private:
  std::mutex mu_;
  std::vector<ExchangeRequest*> list_;
  std::atomic<size_t> count_{0};
};

PendingRounds& pending_rounds() {
  static auto* rounds = new PendingRounds();  // never destroyed: requests may outlive statics
  return *rounds;
}

// One op of this path: the messages of its current round, and what follows when they finished.
class ExchangeRequest final : public NativeRequest {
 public:
  // What the op does once its first round finished.
  enum class Then {
    Finish,               // all_gather, all_to_all, broadcast
    Fold,                 // reduce_scatter: fold the received blocks into the output
    FoldThenAllGather,    // all_reduce: fold, then send the reduced block to every rank
  };

  ExchangeRequest(const char* op, uint32_t group_id, MPI_Comm comm, int rank, int size,
                  int tag, Then then)
      : op_(op), group_id_(group_id), comm_(comm), rank_(rank), size_(size), tag_(tag),
        then_(then) {
    requests_.reserve(2 * static_cast<size_t>(size - 1));
  }

  ~ExchangeRequest() override {
    if (listed_.load()) pending_rounds().remove(this);
    // The engine drops a request only once it finished, or hands it to keep_forever when its
    // op timed out; a request still posted here would let MPI write into freed memory.
    if (!requests_.empty() && mpi_usable()) abandon_posted();
  }

  // The fold of the reduce: `acc` (already holding this rank's block) = the received blocks
  // folded in, in rank order, `count` elements each, the one from rank k at
  // received + slot(k) * count elements.
  void set_fold(void* acc, const char* received, size_t count, MPI_Datatype type,
                size_t element_bytes, MPI_Op op, Scratch scratch) {
    acc_ = acc;
    received_ = received;
    fold_count_ = count;
    type_ = type;
    element_bytes_ = element_bytes;
    op_mpi_ = op;
    scratch_ = std::move(scratch);
  }
  // all_reduce's second round: rank k's reduced block lands at out + offset(k) elements.
  void set_all_gather(char* out, size_t total_count) {
    out_ = out;
    total_count_ = total_count;
    listed_.store(true);
    pending_rounds().add(this);
  }

  // Posts one message of round 1 or 2 (`tag_` or `tag_ + 1`); zero elements post nothing.
  void send(const void* buf, size_t count, MPI_Datatype type, int peer, int round) {
    if (count == 0) return;
    requests_.push_back(MPI_REQUEST_NULL);
    post(MPI_Isend(buf, static_cast<int>(count), type, peer, tag_ + round, comm_,
                   &requests_.back()),
         "MPI_Isend");
  }
  void recv(void* buf, size_t count, MPI_Datatype type, int peer, int round) {
    if (count == 0) return;
    requests_.push_back(MPI_REQUEST_NULL);
    post(MPI_Irecv(buf, static_cast<int>(count), type, peer, tag_ + round, comm_,
                   &requests_.back()),
         "MPI_Irecv");
  }

  bool test() override {
    advance_exchange_rounds();  // before taking our lock: it try-locks the listed requests
    bool finished = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      finished = step();
    }
    if (listed_.load() && !awaits_round_two()) pending_rounds().remove(this);
    return finished;
  }

  // For PendingRounds: one step if no other thread is testing this request; true once the
  // request no longer needs ferry to start a round.
  bool try_step() {
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    step();
    return !awaits_round_two();
  }

  std::atomic<bool> listed_{false};  // in PendingRounds; changed under its mutex after add

  bool wait_until(Clock::time_point deadline) override {
    return wait_polling_mpi([this] { return test(); }, first_wait_, deadline);
  }

  void rethrow_if_failed() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::string describe() const { return str(op_, " on group ", group_id_); }

  bool awaits_round_two() const {
    return then_ == Then::FoldThenAllGather && round_ == 0 && !done_;
  }

  // Tests the current round; starts what follows once it finished. True once the op is done.
  // Called with mu_ held.
  bool step() {
    if (done_) return true;
    if (!mpi_usable()) {  // MPI_Testall after MPI_Finalize is an error MPI cannot report
      finish(std::make_exception_ptr(TransportError(
          str("ferry: ", describe(), " was still pending when MPI was finalized"))));
      return true;
    }
    int flag = 0;
    const int code = MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag,
                                 MPI_STATUSES_IGNORE);
    if (code != MPI_SUCCESS) {
      finish(std::make_exception_ptr(TransportError(
          str("ferry: ", describe(), " failed in MPI: ", mpi_error_string(code)))));
      return true;
    }
    if (!flag) return false;
    requests_.clear();
    try {
      next_round();
    } catch (...) {
      finish(std::current_exception());
    }
    return done_;
  }

  void post(int code, const char* call) {
    if (code == MPI_SUCCESS) return;
    requests_.pop_back();
    abandon_posted();
    check_mpi(code, call, describe());
  }

  // Withdraws what is posted: receives are cancelled, and every handle is kept until the
  // process ends, since MPI may still touch a send's buffer.
  void abandon_posted() {
    for (MPI_Request& r : requests_) MPI_Cancel(&r);
    keep_forever(std::make_shared<std::vector<MPI_Request>>(std::move(requests_)));
    requests_.clear();
  }

  void finish(std::exception_ptr error) {
    if (!requests_.empty()) abandon_posted();
    error_ = std::move(error);
    done_ = true;
  }

  // Runs when every message of the current round finished.
  void next_round() {
    if (round_ == 1 || then_ == Then::Finish) {
      done_ = true;
      return;
    }
    fold();
    if (then_ == Then::Fold) {
      done_ = true;
      return;
    }
    round_ = 1;
    const size_t mine = block_offset(total_count_, size_, rank_) * element_bytes_;
    const size_t my_count = block_count(total_count_, size_, rank_);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      recv(out_ + block_offset(total_count_, size_, p) * element_bytes_,
           block_count(total_count_, size_, p), type_, p, 1);
    }
    for (int p = 0; p < size_; ++p)
      if (p != rank_) send(out_ + mine, my_count, type_, p, 1);
    if (requests_.empty()) done_ = true;  // nothing to receive (fewer elements than ranks)
  }

  // acc = rank k's block op acc, for every other rank k in rank order (MPI's predefined ops
  // are commutative). With more than two ranks that associates differently from a fold that
  // starts at rank 0, but only this rank reduces this block, so every rank gets its bits.
  void fold() {
    if (fold_count_ == 0) return;
    const size_t block_bytes = fold_count_ * element_bytes_;
    int slot = 0;
    for (int k = 0; k < size_; ++k) {
      if (k == rank_) continue;
      const int code = MPI_Reduce_local(received_ + static_cast<size_t>(slot++) * block_bytes,
                                        acc_, static_cast<int>(fold_count_), type_, op_mpi_);
      check_mpi(code, "MPI_Reduce_local", describe());
    }
  }

  const char* op_;
  uint32_t group_id_;
  MPI_Comm comm_;
  int rank_;
  int size_;
  int tag_;
  Then then_;

  std::mutex mu_;
  std::vector<MPI_Request> requests_;  // the current round's, until they finished
  std::atomic<int> round_{0};    // read by awaits_round_two without mu_
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
  Clock::time_point first_wait_{};

  // The fold (Then::Fold and Then::FoldThenAllGather).
  void* acc_ = nullptr;
  const char* received_ = nullptr;
  size_t fold_count_ = 0;
  MPI_Datatype type_ = MPI_BYTE;
  size_t element_bytes_ = 1;
  MPI_Op op_mpi_ = MPI_OP_NULL;
  Scratch scratch_;
  // The second round (Then::FoldThenAllGather).
  char* out_ = nullptr;
  size_t total_count_ = 0;
};

void PendingRounds::add(ExchangeRequest* r) {
  std::lock_guard<std::mutex> lock(mu_);
  list_.push_back(r);
  count_.store(list_.size(), std::memory_order_relaxed);
}

void PendingRounds::remove(ExchangeRequest* r) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find(list_.begin(), list_.end(), r);
  if (it != list_.end()) list_.erase(it);
  r->listed_.store(false);
  count_.store(list_.size(), std::memory_order_relaxed);
}

void PendingRounds::advance_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < list_.size();) {
    if (list_[i]->try_step()) {
      list_[i]->listed_.store(false);
      list_.erase(list_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  count_.store(list_.size(), std::memory_order_relaxed);
}

bool exchange_enabled() {
  const char* v = std::getenv("FERRY_MPI_EXCHANGE");
  return v == nullptr || std::string(v) != "0";
}

}  // namespace

void advance_exchange_rounds() {
  PendingRounds& rounds = pending_rounds();
  if (!rounds.empty()) rounds.advance_all();
}

ExchangeCollectives::ExchangeCollectives(MPI_Comm comm, int rank, int size, uint32_t group_id,
                                         int tag_ub)
    : comm_(comm), rank_(rank), size_(size), group_id_(group_id) {
  // MPI guarantees only 32767 tags; with fewer than 2^25 + 1024 the path stays off.
  const int64_t available = static_cast<int64_t>(tag_ub) - kFirstTag + 1;
  tag_span_ = static_cast<int>(std::max<int64_t>(available, 0) & ~int64_t{1});
  enabled_ = exchange_enabled() && size >= 2 && size <= kMaxRanks && tag_span_ >= 1024;
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
  auto r = std::make_unique<ExchangeRequest>("all_reduce", group_id_, comm_, rank_, size_,
                                             tag_for_next_op(),
                                             ExchangeRequest::Then::FoldThenAllGather);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  const size_t my_count = block_count(count, size_, rank_);
  const size_t my_bytes = my_count * element_bytes;
  Scratch scratch(static_cast<size_t>(size_ - 1) * my_bytes);
  char* received = scratch.data();
  int slot = 0;
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->recv(received + static_cast<size_t>(slot++) * my_bytes, my_count, type, p, 0);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    r->send(src + block_offset(count, size_, p) * element_bytes, block_count(count, size_, p),
            type, p, 0);
  }
  // This rank's own block starts the fold; the sends above never read it.
  const size_t mine = block_offset(count, size_, rank_) * element_bytes;
  if (src != dst && my_bytes > 0) std::memcpy(dst + mine, src + mine, my_bytes);
  r->set_fold(dst + mine, received, my_count, type, element_bytes, op, std::move(scratch));
  r->set_all_gather(dst, count);
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
  auto r = std::make_unique<ExchangeRequest>("reduce_scatter", group_id_, comm_, rank_, size_,
                                             tag_for_next_op(), ExchangeRequest::Then::Fold);
  const char* src = static_cast<const char*>(in);
  const size_t my_count = counts[static_cast<size_t>(rank_)];
  const size_t my_bytes = my_count * element_bytes;
  Scratch scratch(static_cast<size_t>(size_ - 1) * my_bytes);
  char* received = scratch.data();
  int slot = 0;
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->recv(received + static_cast<size_t>(slot++) * my_bytes, my_count, type, p, 0);
  size_t offset = 0, mine = 0;
  for (int p = 0; p < size_; ++p) {
    const size_t n = counts[static_cast<size_t>(p)];
    if (p == rank_)
      mine = offset;
    else
      r->send(src + offset * element_bytes, n, type, p, 0);
    offset += n;
  }
  // `out` never overlaps `in` (NativeCollectives::reduce_scatter).
  if (my_bytes > 0) std::memcpy(out, src + mine * element_bytes, my_bytes);
  r->set_fold(out, received, my_count, type, element_bytes, op, std::move(scratch));
  return r;
}

std::unique_ptr<NativeRequest> ExchangeCollectives::broadcast(void* buf, size_t bytes, int root) {
  if (!enabled_ || size_ != 2) return nullptr;
  auto r = std::make_unique<ExchangeRequest>("broadcast", group_id_, comm_, rank_, size_,
                                             tag_for_next_op(), ExchangeRequest::Then::Finish);
  const size_t pieces = bytes >= kPiecewiseBroadcastBytes ? 4 : 1;
  char* data = static_cast<char*>(buf);
  for (size_t i = 0; i < pieces; ++i) {
    const size_t begin = bytes * i / pieces, end = bytes * (i + 1) / pieces;
    if (rank_ == root)
      r->send(data + begin, end - begin, MPI_BYTE, 1 - root, 0);
    else
      r->recv(data + begin, end - begin, MPI_BYTE, root, 0);
  }
  return r;
}

std::unique_ptr<NativeRequest> ExchangeCollectives::all_gather(const void* in, void* out,
                                                               size_t block) {
  if (!enabled_) return nullptr;
  auto r = std::make_unique<ExchangeRequest>("all_gather", group_id_, comm_, rank_, size_,
                                             tag_for_next_op(), ExchangeRequest::Then::Finish);
  char* dst = static_cast<char*>(out);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->recv(dst + static_cast<size_t>(p) * block, block, MPI_BYTE, p, 0);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->send(in, block, MPI_BYTE, p, 0);
  char* mine = dst + static_cast<size_t>(rank_) * block;
  if (in != mine && block > 0) std::memcpy(mine, in, block);
  return r;
}

std::unique_ptr<NativeRequest> ExchangeCollectives::all_to_all(const void* in, void* out,
                                                               size_t block) {
  if (!enabled_) return nullptr;
  auto r = std::make_unique<ExchangeRequest>("all_to_all_single", group_id_, comm_, rank_,
                                             size_, tag_for_next_op(),
                                             ExchangeRequest::Then::Finish);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->recv(dst + static_cast<size_t>(p) * block, block, MPI_BYTE, p, 0);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->send(src + static_cast<size_t>(p) * block, block, MPI_BYTE, p, 0);
  const size_t mine = static_cast<size_t>(rank_) * block;
  if (block > 0) std::memcpy(dst + mine, src + mine, block);
  return r;
}

std::unique_ptr<NativeRequest> ExchangeCollectives::all_gather_v(const void* in, void* out,
                                                                 const std::vector<size_t>& bytes,
                                                                 const std::vector<size_t>& offset) {
  if (!enabled_) return nullptr;
  auto r = std::make_unique<ExchangeRequest>("all_gather", group_id_, comm_, rank_, size_,
                                             tag_for_next_op(), ExchangeRequest::Then::Finish);
  char* dst = static_cast<char*>(out);
  const size_t me = static_cast<size_t>(rank_);
  for (int p = 0; p < size_; ++p) {
    const size_t k = static_cast<size_t>(p);
    if (p != rank_) r->recv(dst + offset[k], bytes[k], MPI_BYTE, p, 0);
  }
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->send(in, bytes[me], MPI_BYTE, p, 0);
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
  auto r = std::make_unique<ExchangeRequest>(op, group_id_, comm_, rank_, size_,
                                             tag_for_next_op(), ExchangeRequest::Then::Finish);
  for (int p = 0; p < size_; ++p) {
    const size_t k = static_cast<size_t>(p);
    if (p != rank_) r->recv(recv[k], recv_bytes[k], MPI_BYTE, p, 0);
  }
  for (int p = 0; p < size_; ++p) {
    const size_t k = static_cast<size_t>(p);
    if (p != rank_) r->send(send[k], send_bytes[k], MPI_BYTE, p, 0);
  }
  if (send_bytes[me] > 0) std::memcpy(recv[me], send[me], send_bytes[me]);
  return r;
}

}  // namespace ferry::detail
