#include <ferry/backends/mpi/mpi_exchange_op.h>

#include <ferry/backends/mpi/mpi_error.h>
#include <ferry/backends/mpi/mpi_exchange.h>
#include <ferry/backends/mpi/mpi_pending_steps.h>
#include <ferry/backends/mpi/mpi_persistent.h>
#include <ferry/backends/mpi/mpi_request.h>
#include <ferry/backends/mpi/mpi_wait.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/object_pool.h>
#include <ferry/runtime/progress.h>

namespace ferry::detail {
namespace {

// What MPI may still use after ferry gave an op up: kept until the process ends.
struct Abandoned {
  std::vector<MPI_Request> requests;
  std::shared_ptr<Storage> scratch;
};

// The all_reduces whose second round is due (see "Progress" in the header): a step posts it
// when this rank's first round is done.
struct StepSecondRound {
  bool operator()(MpiExchange& x) const {
    x.try_step();
    return !x.second_round_due();
  }
};
using SecondRounds = PendingMpiSteps<MpiExchange, StepSecondRound>;

SecondRounds& second_rounds() {
  static auto* rounds = new SecondRounds();  // never destroyed: requests may outlive statics
  return *rounds;
}

// The request the engine holds for one op of this path.
class ExchangeRequest final : public NativeRequest, public Pooled {
 public:
  explicit ExchangeRequest(std::shared_ptr<MpiExchange> x) : x_(std::move(x)) {}
  ~ExchangeRequest() override {
    // The engine drops a request once it finished, or hands it to keep_forever when its op
    // timed out (then give_up ran); one still posted here must not let MPI write into freed
    // memory.
    x_->give_up();
    second_rounds().remove(x_.get());
  }
  bool test() override {
    advance_exchange_rounds();
    return x_->test();
  }
  bool wait_until(Clock::time_point deadline) override { return x_->wait_until(deadline); }
  void rethrow_if_failed() override { x_->rethrow_if_failed(); }
  void give_up() override {
    x_->give_up();
    second_rounds().remove(x_.get());
  }

 private:
  std::shared_ptr<MpiExchange> x_;
};

}  // namespace

void MpiExchange::send(const void* buf, size_t count, MPI_Datatype type, int peer, int round,
                       bool post_empty) {
  if (count == 0 && !post_empty) return;
  requests_.push_back(MPI_REQUEST_NULL);
  messages_.push_back({peer, static_cast<int>(count), type, false});
  post(MPI_Isend(buf, static_cast<int>(count), type, peer, tag_ + round, comm_,
                 &requests_.back()),
       "MPI_Isend");
}

void MpiExchange::recv(void* buf, size_t count, MPI_Datatype type, int peer, int round,
                       bool post_empty) {
  if (count == 0 && !post_empty) return;
  requests_.push_back(MPI_REQUEST_NULL);
  messages_.push_back({peer, static_cast<int>(count), type, true});
  post(MPI_Irecv(buf, static_cast<int>(count), type, peer, tag_ + round, comm_,
                 &requests_.back()),
       "MPI_Irecv");
}

std::string MpiExchange::describe() const { return str(op_, " on group ", group_id_); }

// Tests the current round; runs what follows once it finished. True once the op is done.
// Called with mu_ held.
bool MpiExchange::step() {
  if (done_) return true;
  if (!mpi_usable()) {  // MPI_Test after MPI_Finalize is an error MPI cannot even report
    fail(std::make_exception_ptr(TransportError(
        str("ferry: ", describe(), " was still pending when MPI was finalized"))));
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
    fail(std::current_exception());
  }
  return true;
}

void MpiExchange::post_second_round() {
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

void MpiExchange::post(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  requests_.pop_back();
  messages_.pop_back();
  abandon();
  check_mpi(code, call, describe());
}

// Gives up what is posted: receives are cancelled (when MPI is still usable), and the handles
// and the scratch stay alive until the process ends, since MPI may still write into them.
void MpiExchange::abandon() {
  if (mpi_usable()) {
    for (size_t i = 0; i < requests_.size(); ++i)
      if (requests_[i] != MPI_REQUEST_NULL && messages_[i].is_recv) MPI_Cancel(&requests_[i]);
  }
  auto kept = std::make_shared<Abandoned>();
  kept->requests.assign(requests_.begin(), requests_.end());
  kept->scratch = std::move(scratch_);
  keep_forever(std::move(kept));
  requests_.clear();
  messages_.clear();
}

// MPI accepts a shorter message into a larger receive; a peer that sent a different size
// called with different sizes.
void MpiExchange::check_received_sizes() const {
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

void MpiExchange::run_fold() {
  for (const char* source : fold_.sources) {
    const int code = MPI_Reduce_local(source, fold_.acc, static_cast<int>(fold_.count),
                                      fold_.type, fold_.op);
    // The op's name is put together only for the error: this runs on every fold.
    if (code != MPI_SUCCESS) check_mpi(code, "MPI_Reduce_local", describe());
  }
}

// Request i finished with MPI error `code`: a receive that a longer message overflowed means
// the ranks called with different sizes.
void MpiExchange::fail_request(size_t i, int code) {
  int error_class = MPI_SUCCESS;
  MPI_Error_class(code, &error_class);
  const Message& m = messages_[i];
  if (m.is_recv && error_class == MPI_ERR_TRUNCATE)
    fail(std::make_exception_ptr(MismatchError(
        str("ferry: ", describe(), ": rank ", m.peer, " sent more than the ", m.count, " ",
            unit(m), " this rank expected: the ranks called with different sizes"))));
  else
    fail(std::make_exception_ptr(TransportError(
        str("ferry: ", describe(), " failed in MPI: ", mpi_error_string(code)))));
}

void MpiExchange::fail(std::exception_ptr error) {
  if (!requests_.empty()) abandon();
  second_round_due_.store(false);
  error_ = std::move(error);
  done_ = true;
}


bool MpiExchange::wait_until(Clock::time_point deadline) {
  return wait_polling_mpi(
      [this] {
        advance_exchange_rounds();
        return test();
      },
      first_wait_, deadline);
}

std::unique_ptr<NativeRequest> exchange_request(std::shared_ptr<MpiExchange> op) {
  if (op->second_round_due()) second_rounds().add(op);
  return std::make_unique<ExchangeRequest>(std::move(op));
}

void advance_exchange_rounds() {
  second_rounds().advance();
  advance_persistent_first_starts();
}

void give_up_exchange(NativeRequest& request) { request.give_up(); }

}  // namespace ferry::detail
