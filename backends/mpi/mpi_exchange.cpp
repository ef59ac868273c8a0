#include "backends/mpi/mpi_exchange.h"

#include "backends/mpi/mpi_error.h"
#include "backends/mpi/mpi_request.h"
#include "backends/mpi/mpi_wait.h"
#include "runtime/block_cache.h"
#include "runtime/error.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ferry::detail {
namespace {

constexpr int kFirstTag = 1 << 25;  // above every tag OpContext's algorithms use
constexpr int64_t kMinTags = int64_t{1} << 20;

// When `count` elements split into `ranks` blocks, the first count % ranks one larger.
size_t block_count(size_t count, int ranks, int k) {
  const size_t w = static_cast<size_t>(ranks), kk = static_cast<size_t>(k);
  return count / w + (kk < count % w ? 1 : 0);
}
size_t block_offset(size_t count, int ranks, int k) {
  const size_t w = static_cast<size_t>(ranks), kk = static_cast<size_t>(k);
  return kk * (count / w) + std::min(kk, count % w);
}

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

// The reduction that follows the first round: acc = sources[i] op acc for each source in order
// (acc already holds this rank's own block).
struct Fold {
  char* acc = nullptr;
  std::vector<const char*> sources;
  size_t count = 0;
  MPI_Datatype type = MPI_BYTE;
  size_t element_bytes = 1;
  MPI_Op op = MPI_OP_NULL;
};

// One op of this path: its posted messages, what follows when they finished (a fold; for an
// all_reduce, then its second round), its outcome. Shared by the op's request and, while an
// all_reduce's second round is due, by the list of SecondRounds.
class Exchange {
 public:
  Exchange(const char* op, uint32_t group_id, MPI_Comm comm, int tag, int rank, int ranks)
      : op_(op), group_id_(group_id), comm_(comm), tag_(tag), rank_(rank), ranks_(ranks) {
    requests_.reserve(2 * static_cast<size_t>(ranks - 1));
    messages_.reserve(2 * static_cast<size_t>(ranks - 1));
  }
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  // `bytes` of scratch that live as long as the op (and longer if it is abandoned).
  char* scratch(size_t bytes) {
    scratch_ = Scratch(bytes);
    return scratch_.data();
  }

  // Posts one message of the first round (0) or of all_reduce's second (1); zero elements post
  // nothing (the peer posts nothing either).
  void send(const void* buf, size_t count, MPI_Datatype type, int peer, int round = 0) {
    if (count == 0) return;
    requests_.push_back(MPI_REQUEST_NULL);
    messages_.push_back({peer, static_cast<int>(count), type, false});
    post(MPI_Isend(buf, static_cast<int>(count), type, peer, tag_ + round, comm_,
                   &requests_.back()),
         "MPI_Isend");
  }
  void recv(void* buf, size_t count, MPI_Datatype type, int peer, int round = 0) {
    if (count == 0) return;
    requests_.push_back(MPI_REQUEST_NULL);
    messages_.push_back({peer, static_cast<int>(count), type, true});
    post(MPI_Irecv(buf, static_cast<int>(count), type, peer, tag_ + round, comm_,
                   &requests_.back()),
         "MPI_Irecv");
  }

  void then_fold(Fold fold) { fold_ = std::move(fold); }
  // all_reduce: after the fold, the second round sends this rank's reduced block of `out` (the
  // elements split into blocks by block_count / block_offset) to every rank and receives theirs.
  void then_all_gather(char* out, size_t total_count) {
    out_ = out;
    total_count_ = total_count;
    second_round_due_.store(true);
  }
  bool second_round_due() const { return second_round_due_.load(); }

  bool test() {
    std::lock_guard<std::mutex> lock(mu_);
    return step();
  }
  // For SecondRounds: steps unless another thread is testing the op right now.
  void try_step() {
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (lock.owns_lock()) step();
  }
  bool wait_until(Clock::time_point deadline);
  void rethrow_if_failed() {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) std::rethrow_exception(error_);
  }

  // The op will never finish (it timed out, or its request is gone): whatever is still posted
  // is given up, and nothing is started any more.
  void give_up() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!requests_.empty()) abandon();
    second_round_due_.store(false);
    done_ = true;
  }

 private:
  struct Message {
    int peer;
    int count;
    MPI_Datatype type;
    bool is_recv;
  };

  std::string describe() const { return str(op_, " on group ", group_id_); }
  static const char* unit(const Message& m) { return m.type == MPI_BYTE ? "bytes" : "elements"; }

  // Tests the current round; runs what follows once it finished. True once the op is done.
  // Called with mu_ held.
  bool step() {
    if (done_) return true;
    if (!mpi_usable()) {  // MPI_Test after MPI_Finalize is an error MPI cannot even report
      fail(TransportError(str("ferry: ", describe(), " was still pending when MPI was finalized")));
      return true;
    }
    // One request at a time (progress is global, so testing the first unfinished one advances
    // them all), so that a failed one is known: a receive that a longer message overflowed is a
    // size mismatch. MPICH 4.0.2 reports a failed request of MPI_Test and MPI_Testall alike
    // through MPI_COMM_WORLD's error handler, not the request's communicator's: by default that
    // aborts the job with MPI's "Message truncated"; with MPI_ERRORS_RETURN set on
    // MPI_COMM_WORLD it arrives here and becomes a MismatchError.
    statuses_.resize(requests_.size());
    for (; first_pending_ < requests_.size(); ++first_pending_) {
      const size_t i = first_pending_;
      int flag = 0;
      const int code = MPI_Test(&requests_[i], &flag, &statuses_[i]);
      if (code != MPI_SUCCESS) {
        fail_request(i, code);
        return true;
      }
      if (!flag) return false;
    }
    first_pending_ = 0;
    requests_.clear();
    try {
      check_received_sizes();
      messages_.clear();
      if (fold_.acc != nullptr) {
        run_fold();
        fold_.acc = nullptr;
      }
      if (second_round_due_.load()) {
        second_round_due_.store(false);
        post_second_round();
        if (!requests_.empty()) return false;
      }
      done_ = true;
    } catch (...) {
      if (!requests_.empty()) abandon();
      second_round_due_.store(false);
      error_ = std::current_exception();
      done_ = true;
    }
    return true;
  }

  void post_second_round() {
    const size_t mine = block_offset(total_count_, ranks_, rank_) * fold_.element_bytes;
    const size_t my_count = block_count(total_count_, ranks_, rank_);
    for (int p = 0; p < ranks_; ++p) {
      if (p == rank_) continue;
      recv(out_ + block_offset(total_count_, ranks_, p) * fold_.element_bytes,
           block_count(total_count_, ranks_, p), fold_.type, p, 1);
    }
    for (int p = 0; p < ranks_; ++p)
      if (p != rank_) send(out_ + mine, my_count, fold_.type, p, 1);
  }

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
    messages_.clear();
  }

  // Request i finished with MPI error `code`: a receive that a longer message overflowed means
  // the ranks called with different sizes.
  void fail_request(size_t i, int code) {
    int error_class = MPI_SUCCESS;
    MPI_Error_class(code, &error_class);
    const Message& m = messages_[i];
    if (m.is_recv && error_class == MPI_ERR_TRUNCATE) {
      if (!requests_.empty()) abandon();
      second_round_due_.store(false);
      error_ = std::make_exception_ptr(MismatchError(
          str("ferry: ", describe(), ": rank ", m.peer, " sent more than the ", m.count, " ",
              unit(m), " this rank expected: the ranks called with different sizes")));
      done_ = true;
      return;
    }
    fail(TransportError(str("ferry: ", describe(), " failed in MPI: ", mpi_error_string(code))));
  }

  void fail(const TransportError& e) {
    if (!requests_.empty()) abandon();
    second_round_due_.store(false);
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
        throw MismatchError(str("ferry: ", describe(), ": rank ", m.peer, " sent ", got, " ",
                                unit(m), " where this rank expected ", m.count,
                                ": the ranks called with different sizes"));
    }
  }

  void run_fold() {
    for (const char* source : fold_.sources) {
      const int code = MPI_Reduce_local(source, fold_.acc, static_cast<int>(fold_.count),
                                        fold_.type, fold_.op);
      check_mpi(code, "MPI_Reduce_local", describe());
    }
  }

  const char* op_;
  uint32_t group_id_;
  MPI_Comm comm_;
  int tag_;
  int rank_;
  int ranks_;

  std::mutex mu_;
  std::vector<MPI_Request> requests_;  // the current round's, until they finished
  std::vector<Message> messages_;      // one per request, in the same order
  std::vector<MPI_Status> statuses_;  // of the finished requests, for the received sizes
  size_t first_pending_ = 0;          // requests before it have finished
  Scratch scratch_;
  Fold fold_;
  char* out_ = nullptr;  // all_reduce's second round
  size_t total_count_ = 0;
  std::atomic<bool> second_round_due_{false};  // read by SecondRounds without mu_
  bool done_ = false;
  std::exception_ptr error_;
  Clock::time_point first_wait_{};
};

// The all_reduces whose second round is due (see "Progress" in the header), and the thread
// that advances them when no ferry call does.
class SecondRounds {
 public:
  void add(std::shared_ptr<Exchange> x) {
    std::lock_guard<std::mutex> lock(mu_);
    list_.push_back(std::move(x));
    count_.store(list_.size(), std::memory_order_relaxed);
    if (!driver_.joinable() && !stopping_) driver_ = std::thread([this] { drive(); });
    if (driver_asleep_) cv_.notify_one();
  }

  // Steps every listed op nobody else is testing right now, and forgets the ones whose second
  // round is posted. A thread that finds another one at it leaves the work to that one.
  void advance() {
    if (count_.load(std::memory_order_relaxed) == 0 || !mpi_usable()) return;
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return;
    for (const auto& x : list_) x->try_step();
    std::erase_if(list_, [](const auto& x) { return !x->second_round_due(); });
    count_.store(list_.size(), std::memory_order_relaxed);
  }

  void remove(const Exchange* x) {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(list_, [x](const auto& y) { return y.get() == x; });
    count_.store(list_.size(), std::memory_order_relaxed);
  }

  // Before MPI_Finalize: the driver must not call MPI after it.
  void stop() {
    std::thread driver;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      cv_.notify_one();
      driver = std::move(driver_);
    }
    if (driver.joinable()) driver.join();
  }

 private:
  // While ops are listed, steps them every kDrivePoll; after kIdleBeforeSleep with none, waits
  // for add() to wake it (so a stretch of all_reduces costs no wake-up per op).
  void drive() {
    std::unique_lock<std::mutex> lock(mu_);
    auto idle_since = Clock::now();
    while (!stopping_) {
      if (list_.empty() && Clock::now() - idle_since >= kIdleBeforeSleep) {
        driver_asleep_ = true;
        cv_.wait(lock, [this] { return stopping_ || !list_.empty(); });
        driver_asleep_ = false;
        continue;
      }
      cv_.wait_for(lock, kDrivePoll);
      if (stopping_) break;
      if (list_.empty()) continue;
      lock.unlock();
      advance();
      lock.lock();
      idle_since = Clock::now();
    }
  }

  static constexpr auto kDrivePoll = std::chrono::milliseconds(1);
  static constexpr auto kIdleBeforeSleep = std::chrono::milliseconds(50);

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Exchange>> list_;
  std::atomic<size_t> count_{0};
  std::thread driver_;
  bool driver_asleep_ = false;
  bool stopping_ = false;
};

SecondRounds& second_rounds() {
  static auto* rounds = new SecondRounds();  // never destroyed: requests may outlive statics
  return *rounds;
}

bool Exchange::wait_until(Clock::time_point deadline) {
  return wait_polling_mpi(
      [this] {
        second_rounds().advance();
        return test();
      },
      first_wait_, deadline);
}

// The request the engine holds for one op of this path.
class ExchangeRequest final : public NativeRequest {
 public:
  explicit ExchangeRequest(std::shared_ptr<Exchange> x) : x_(std::move(x)) {}
  ~ExchangeRequest() override {
    // The engine drops a request once it finished, or hands it to keep_forever when its op
    // timed out (then give_up ran); one still posted here must not let MPI write into freed
    // memory.
    x_->give_up();
    second_rounds().remove(x_.get());
  }
  bool test() override {
    second_rounds().advance();
    return x_->test();
  }
  bool wait_until(Clock::time_point deadline) override { return x_->wait_until(deadline); }
  void rethrow_if_failed() override { x_->rethrow_if_failed(); }
  void give_up() {
    x_->give_up();
    second_rounds().remove(x_.get());
  }

 private:
  std::shared_ptr<Exchange> x_;
};

bool exchange_enabled() {
  const char* v = std::getenv("FERRY_MPI_EXCHANGE");
  return v == nullptr || std::string(v) != "0";
}

}  // namespace

void advance_exchange_rounds() { second_rounds().advance(); }

void give_up_exchange(NativeRequest& request) {
  if (auto* x = dynamic_cast<ExchangeRequest*>(&request)) x->give_up();
}

void stop_exchange_driver() { second_rounds().stop(); }

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
  auto x = std::make_shared<Exchange>("all_reduce", group_id_, comm_, tag_for_next_op(), rank_,
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
  second_rounds().add(x);
  return std::make_unique<ExchangeRequest>(std::move(x));
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
  auto r = std::make_shared<Exchange>("reduce_scatter", group_id_, comm_, tag_for_next_op(),
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
  return std::make_unique<ExchangeRequest>(std::move(r));
}

std::unique_ptr<NativeRequest> ExchangeCollectives::broadcast(void* buf, size_t bytes, int root) {
  if (!enabled_ || size_ != 2) return nullptr;
  auto r = std::make_shared<Exchange>("broadcast", group_id_, comm_, tag_for_next_op(), rank_,
                                      size_);
  if (rank_ == root)
    r->send(buf, bytes, MPI_BYTE, 1 - root);
  else
    r->recv(buf, bytes, MPI_BYTE, root);
  return std::make_unique<ExchangeRequest>(std::move(r));
}

std::unique_ptr<NativeRequest> ExchangeCollectives::all_gather(const void* in, void* out,
                                                               size_t block) {
  if (!enabled_) return nullptr;
  auto r = std::make_shared<Exchange>("all_gather", group_id_, comm_, tag_for_next_op(), rank_,
                                      size_);
  char* dst = static_cast<char*>(out);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->recv(dst + static_cast<size_t>(p) * block, block, MPI_BYTE, p);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->send(in, block, MPI_BYTE, p);
  char* mine = dst + static_cast<size_t>(rank_) * block;
  if (in != mine && block > 0) std::memcpy(mine, in, block);
  return std::make_unique<ExchangeRequest>(std::move(r));
}

std::unique_ptr<NativeRequest> ExchangeCollectives::all_to_all(const void* in, void* out,
                                                               size_t block) {
  if (!enabled_) return nullptr;
  auto r = std::make_shared<Exchange>("all_to_all_single", group_id_, comm_, tag_for_next_op(),
                                      rank_, size_);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->recv(dst + static_cast<size_t>(p) * block, block, MPI_BYTE, p);
  for (int p = 0; p < size_; ++p)
    if (p != rank_) r->send(src + static_cast<size_t>(p) * block, block, MPI_BYTE, p);
  const size_t mine = static_cast<size_t>(rank_) * block;
  if (block > 0) std::memcpy(dst + mine, src + mine, block);
  return std::make_unique<ExchangeRequest>(std::move(r));
}

std::unique_ptr<NativeRequest> ExchangeCollectives::all_gather_v(const void* in, void* out,
                                                                 const std::vector<size_t>& bytes,
                                                                 const std::vector<size_t>& offset) {
  if (!enabled_) return nullptr;
  auto r = std::make_shared<Exchange>("all_gather", group_id_, comm_, tag_for_next_op(), rank_,
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
  return std::make_unique<ExchangeRequest>(std::move(r));
}

std::unique_ptr<NativeRequest> ExchangeCollectives::all_to_all_v(
    const char* op, const std::vector<const void*>& send, const std::vector<size_t>& send_bytes,
    const std::vector<void*>& recv, const std::vector<size_t>& recv_bytes) {
  if (!enabled_) return nullptr;
  const size_t me = static_cast<size_t>(rank_);
  FERRY_CHECK(send_bytes[me] == recv_bytes[me], InvalidArgument, op, " on group ", group_id_,
              " rank ", rank_, ": the block this rank keeps must be the same size both ways, ",
              "given ", send_bytes[me], " bytes to send and ", recv_bytes[me], " to receive");
  auto r = std::make_shared<Exchange>(op, group_id_, comm_, tag_for_next_op(), rank_, size_);
  for (int p = 0; p < size_; ++p) {
    const size_t k = static_cast<size_t>(p);
    if (p != rank_) r->recv(recv[k], recv_bytes[k], MPI_BYTE, p);
  }
  for (int p = 0; p < size_; ++p) {
    const size_t k = static_cast<size_t>(p);
    if (p != rank_) r->send(send[k], send_bytes[k], MPI_BYTE, p);
  }
  if (send_bytes[me] > 0) std::memcpy(recv[me], send[me], send_bytes[me]);
  return std::make_unique<ExchangeRequest>(std::move(r));
}

}  // namespace ferry::detail
