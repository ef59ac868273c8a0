// One op of the point-to-point path of mpi_exchange.h (internal): its messages, what follows
// them, and the progress of all_reduce's second round (see "Progress" there).
#pragma once

#include <ferry/backends/native_collectives.h>
#include <ferry/runtime/small_vector.h>
#include <ferry/runtime/tensor_detail.h>

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ferry::detail {

// When `count` elements split into `ranks` blocks, the first count % ranks one larger.
inline size_t block_count(size_t count, int ranks, int k) {
  const size_t w = static_cast<size_t>(ranks), kk = static_cast<size_t>(k);
  return count / w + (kk < count % w ? 1 : 0);
}
inline size_t block_offset(size_t count, int ranks, int k) {
  const size_t w = static_cast<size_t>(ranks), kk = static_cast<size_t>(k);
  return kk * (count / w) + std::min(kk, count % w);
}

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

// One op: its posted messages, what follows when they finished (a fold; for an all_reduce, then
// its second round), its outcome. Built by ExchangeCollectives, then handed to exchange_request.
// Not named Exchange: collectives/algorithms/algorithms.h has a ferry::detail::Exchange too, and
// two classes of one name break the one-definition rule (the linker kept one inline destructor
// for both: ASan saw the MPI op's destructor free another class's members and crash).
class MpiExchange {
 public:
  MpiExchange(const char* op, uint32_t group_id, MPI_Comm comm, int tag, int rank, int ranks)
      : op_(op), group_id_(group_id), comm_(comm), tag_(tag), rank_(rank), ranks_(ranks) {}
  MpiExchange(const MpiExchange&) = delete;
  MpiExchange& operator=(const MpiExchange&) = delete;

  // `bytes` of scratch (from the block cache, as tensors are) that live as long as the op, and
  // longer if it is abandoned; null for zero bytes.
  char* scratch(size_t bytes) {
    if (bytes == 0) return nullptr;
    scratch_ = Storage::allocate(bytes);
    return reinterpret_cast<char*>(scratch_->data_);
  }

  // Posts one message of the first round (0) or of all_reduce's second (1); zero elements post
  // nothing (the peer posts nothing either), unless `post_empty`: where several messages
  // between two ranks share a round, each is matched to its counterpart by order, so an empty
  // one must be posted too (and a size that differs is then caught as a mismatch).
  void send(const void* buf, size_t count, MPI_Datatype type, int peer, int round = 0,
            bool post_empty = false);
  void recv(void* buf, size_t count, MPI_Datatype type, int peer, int round = 0,
            bool post_empty = false);

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
  // Steps unless another thread is testing the op right now.
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

  std::string describe() const;
  static const char* unit(const Message& m) { return m.type == MPI_BYTE ? "bytes" : "elements"; }

  bool step();
  void post_second_round();
  void post(int code, const char* call);
  void abandon();
  void fail_request(size_t i, int code);
  void fail(std::exception_ptr error);
  void check_received_sizes() const;
  void run_fold();

  const char* op_;
  uint32_t group_id_;
  MPI_Comm comm_;
  int tag_;
  int rank_;
  int ranks_;

  std::mutex mu_;
  // The lists hold a round's messages inline up to kInlineMessages (a send and a receive per
  // peer and part: three parts between two ranks, one between four), so that an op costs no
  // allocation for them; the op itself comes from the pool (make_pooled).
  static constexpr size_t kInlineMessages = 8;
  SmallVector<MPI_Request, kInlineMessages> requests_;  // the current round's, until finished
  SmallVector<Message, kInlineMessages> messages_;      // one per request, in the same order
  SmallVector<MPI_Status, kInlineMessages> statuses_;   // of the finished ones: received sizes
  size_t first_pending_ = 0;           // requests before it have finished
  std::shared_ptr<Storage> scratch_;
  Fold fold_;
  char* out_ = nullptr;  // all_reduce's second round
  size_t total_count_ = 0;
  std::atomic<bool> second_round_due_{false};  // read by the second-round list without mu_
  bool done_ = false;
  std::exception_ptr error_;
  Clock::time_point first_wait_{};
};

// The request the engine holds for the op; an all_reduce whose second round is due is also
// listed for advance_exchange_rounds and the progress thread.
std::unique_ptr<NativeRequest> exchange_request(std::shared_ptr<MpiExchange> op);

}  // namespace ferry::detail
