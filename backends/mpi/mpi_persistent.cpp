#include <ferry/backends/mpi/mpi_persistent.h>

#include <ferry/backends/mpi/mpi_call_key.h>

#include <ferry/backends/mpi/mpi_error.h>
#include <ferry/backends/mpi/mpi_exchange.h>
#include <ferry/backends/mpi/mpi_pending_steps.h>
#include <ferry/backends/mpi/mpi_request.h>
#include <ferry/backends/mpi/mpi_types.h>
#include <ferry/backends/mpi/mpi_wait.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/object_pool.h>
#include <ferry/runtime/progress.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::detail {

// One persistent request, its staging buffers and the op it currently carries. Ops on a slot
// are numbered 1, 2, ... (tickets); at most the newest one is in flight.
struct PersistentCollectives::Slot {
  std::mutex mu;  // guards everything below, and MPI calls on `request`
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<std::byte> send;
  std::vector<std::byte> recv;
  const std::byte* result = nullptr;  // what an op leaves in staging: recv (send for broadcast)
  size_t result_bytes = 0;
  uint64_t newest = 0;          // ticket of the newest op started
  bool in_flight = false;       // the newest op has not finished
  void* destination = nullptr;  // where the newest op's result goes (null: nowhere)
  uint64_t failed_ticket = 0;   // the op that failed, if any (the group is poisoned then)
  std::exception_ptr error;
  // The key check (mpi_call_key.h): every rank's key, gathered when the slot was created.
  // Until it finished and agreed, the request is not started; a slot whose keys differed never
  // is. Released once agreed.
  std::unique_ptr<KeyCheck> check;
  bool checked = false;
  std::exception_ptr mismatch;  // the check found different keys, or failed
  bool given_up = false;        // the op timed out: nothing is started any more

  ~Slot() {
    // A slot still in flight belongs to a request that was given up (kept forever).
    if (request != MPI_REQUEST_NULL && !in_flight && mpi_usable()) MPI_Request_free(&request);
    // MPI still owns the buffers of a key check that never finished.
    if (check && !check->finished()) keep_forever(std::shared_ptr<KeyCheck>(std::move(check)));
  }

  // True once the key check finished (then `checked`, or `mismatch` set). Called with `mu`.
  bool poll_check() {
    if (checked || mismatch) return true;
    if (!check->test()) return false;
    mismatch = check->outcome();
    checked = !mismatch;
    return true;
  }

  // The slot's first op is issued but not started: it waits for the key check.
  bool first_start_due() const { return in_flight && !checked && !mismatch && !given_up; }

  // Starts the first op once every rank's key is known to agree, or fails it when they differ.
  // True once it no longer waits for the check. Called with `mu`.
  bool start_when_agreed() {
    if (!first_start_due()) return true;
    if (!poll_check()) return false;
    if (mismatch) return finish_with(mismatch);
    const int code = MPI_Start(&request);
    if (code != MPI_SUCCESS)
      return finish_with(std::make_exception_ptr(TransportError(
          str("ferry: MPI_Start of ", check->describe(), " failed: ", mpi_error_string(code)))));
    check.reset();  // agreed: nothing of it is needed any more
    return true;
  }

  // True once op `ticket` finished; the result is then at its destination. Called with `mu`.
  bool poll(uint64_t ticket) {
    if (ticket != newest || !in_flight) return true;  // older ops finished before newer began
    if (!mpi_usable()) return finish_with(TransportError(
        "ferry: a persistent MPI collective was still pending when MPI was finalized"));
    if (!checked) {
      if (!start_when_agreed()) return false;
      if (!in_flight) return true;  // the keys differed, or MPI_Start failed
      if (!checked) return false;   // given up before it started: it never will
    }
    int flag = 0;
    const int code = MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
    if (code != MPI_SUCCESS)
      return finish_with(TransportError(
          str("ferry: a persistent MPI collective failed in MPI: ", mpi_error_string(code))));

    if (!flag) return false;
    if (destination != nullptr && result_bytes > 0)
      std::memcpy(destination, result, result_bytes);
    destination = nullptr;
    in_flight = false;
    return true;
  }

 private:
  bool finish_with(const TransportError& e) { return finish_with(std::make_exception_ptr(e)); }
  bool finish_with(std::exception_ptr e) {
    failed_ticket = newest;
    error = std::move(e);
    destination = nullptr;
    in_flight = false;
    return true;
  }
};

namespace {

// The slots whose first op waits for its key check. Its MPI_Start is ferry's to make, and the
// peers wait for it: a rank that is waiting for another op (an op issued later, whose own check
// cannot finish before this one started on every rank), or sits outside ferry, must still make
// it. So every such slot is listed process-wide and started from every ferry test of an MPI
// request (advance_persistent_first_starts) and from the process's progress thread, as
// all_reduce's second round of the point-to-point path is (mpi_exchange.h, "Progress").
struct StepFirstStart {
  // A slot another thread holds right now is left for the next step.
  bool operator()(PersistentCollectives::Slot& slot) const {
    std::unique_lock<std::mutex> slot_lock(slot.mu, std::try_to_lock);
    if (!slot_lock.owns_lock()) return false;
    slot.start_when_agreed();
    return !slot.first_start_due();
  }
};
using FirstStarts = PendingMpiSteps<PersistentCollectives::Slot, StepFirstStart>;

FirstStarts& first_starts() {
  static auto* starts = new FirstStarts();  // never destroyed: requests may outlive statics
  return *starts;
}

class PersistentRequest final : public NativeRequest, public Pooled {
 public:
  PersistentRequest(std::shared_ptr<PersistentCollectives::Slot> slot, uint64_t ticket)
      : slot_(std::move(slot)), ticket_(ticket) {}

  bool test() override {
    advance_exchange_rounds();  // MPI progresses every request here; ferry's rounds too
    std::lock_guard<std::mutex> lock(slot_->mu);
    if (done_) return true;
    if (!slot_->poll(ticket_)) return false;
    done_ = true;
    if (slot_->failed_ticket == ticket_) error_ = slot_->error;
    return true;
  }

  bool wait_until(Clock::time_point deadline) override {
    return wait_polling_mpi([this] { return test(); }, first_wait_, deadline);
  }

  void rethrow_if_failed() override {
    std::lock_guard<std::mutex> lock(slot_->mu);
    if (error_) std::rethrow_exception(error_);
  }

  // The op timed out: a first start still waiting for the check is not made any more.
  void give_up() override {
    {
      std::lock_guard<std::mutex> lock(slot_->mu);
      slot_->given_up = true;
    }
    first_starts().remove(slot_.get());
  }

 private:
  std::shared_ptr<PersistentCollectives::Slot> slot_;
  uint64_t ticket_;
  bool done_ = false;  // guarded by the slot's mutex, as is error_
  std::exception_ptr error_;
  Clock::time_point first_wait_{};
};



bool enabled_by_environment() { return config().mpi_persistent; }

}  // namespace

void advance_persistent_first_starts() { first_starts().advance(); }

PersistentCollectives::PersistentCollectives(MPI_Comm comm, int rank, int size,
                                             uint32_t group_id)
    : comm_(comm), rank_(rank), size_(size), group_id_(group_id),
      enabled_(enabled_by_environment()) {}

PersistentCollectives::~PersistentCollectives() = default;

template <class Init>
std::shared_ptr<PersistentCollectives::Slot> PersistentCollectives::slot_for(
    const Key& key, size_t send_bytes, size_t recv_bytes, Init&& init) {
  if (!enabled_ || send_bytes > kMaxStagedBytes || recv_bytes > kMaxStagedBytes) return nullptr;
  for (auto& [k, slot] : slots_)
    if (k == key) return slot;
  if (slots_.size() >= kMaxKeys) return nullptr;
  auto slot = std::make_shared<Slot>();
  post_key_check(key, *slot);
  slot->send.resize(send_bytes);
  slot->recv.resize(recv_bytes);
  slot->result = slot->recv.data();
  slot->result_bytes = recv_bytes;
  const int code = init(*slot);
  if (code != MPI_SUCCESS) {
    slot->request = MPI_REQUEST_NULL;
    check_mpi(code, "a persistent collective's init", str("group ", group_id_));
  }
  slots_.emplace_back(key, slot);
  return slot;
}

void PersistentCollectives::post_key_check(const Key& key, Slot& slot) const {
  // The key as every other path of the group states it (the same exchange of keys, so ranks
  // whose calls differ in which path they take still compare with each other).
  const CallKey mine = key.kind == CallKind::AllToAll
                           ? all_to_all_key(rank_, size_, static_cast<size_t>(key.count))
                           : agreed_key(key.kind, key.count, key.type, key.op, key.root);
  slot.check = std::make_unique<KeyCheck>(comm_, rank_, size_, group_id_,
                                          "a persistent collective", mine);
  slot.check->post();  // on failure the slot, dropped, keeps the unfinished check for MPI
}

std::unique_ptr<NativeRequest> PersistentCollectives::start(const char* what,
                                                            std::shared_ptr<Slot> slot,
                                                            const void* in, int copies,
                                                            void* out) {
  std::unique_lock<std::mutex> lock(slot->mu);
  if (slot->in_flight) {
    // The previous op of this key: every rank started it before this one, so it finishes.
    lock.unlock();
    Clock::time_point first_wait{};
    const bool finished = wait_polling_mpi(
        [&] {
          advance_exchange_rounds();
          std::lock_guard<std::mutex> poll_lock(slot->mu);
          return slot->poll(slot->newest);
        },
        first_wait, Clock::now() + default_timeout());
    lock.lock();
    FERRY_CHECK(finished, TimeoutError, what, " on group ", group_id_, ": the previous ", what,
                " of the same size did not finish within the timeout (",
                default_timeout().count(), " ms); the job must end");
  }
  if (slot->error && slot->failed_ticket == slot->newest) std::rethrow_exception(slot->error);
  // A zero-element op has no staging bytes (send.data() may be null) and may be given a null
  // `in`: memcpy from or to null is undefined even for 0 bytes.
  if (in != nullptr && copies > 0 && !slot->send.empty()) {
    const size_t block = slot->send.size() / static_cast<size_t>(copies);
    for (int c = 0; c < copies; ++c)
      std::memcpy(slot->send.data() + static_cast<size_t>(c) * block, in, block);
  }
  if (slot->mismatch) std::rethrow_exception(slot->mismatch);  // never started: still unusable
  const uint64_t ticket = ++slot->newest;
  // An unchecked slot starts once the check agreed: when its request is tested, or when any
  // other MPI request of this process is, or from the progress thread (FirstStarts).
  const int code = slot->checked ? MPI_Start(&slot->request) : MPI_SUCCESS;
  if (code != MPI_SUCCESS) {
    slot->failed_ticket = ticket;
    check_mpi(code, "MPI_Start", str(what, " on group ", group_id_));
  }
  slot->destination = out;
  slot->in_flight = true;
  const bool first_start_due = slot->first_start_due();
  lock.unlock();
  if (first_start_due) first_starts().add(slot);
  return std::make_unique<PersistentRequest>(std::move(slot), ticket);
}

std::unique_ptr<NativeRequest> PersistentCollectives::all_reduce(const void* in, void* out,
                                                                 int count, MPI_Datatype type,
                                                                 size_t element_bytes,
                                                                 MPI_Op op) {
  const size_t bytes = static_cast<size_t>(count) * element_bytes;
  auto slot = slot_for(Key{CallKind::AllReduce, count, type, op, -1}, bytes, bytes, [&](Slot& s) {
    return MPI_Allreduce_init(s.send.data(), s.recv.data(), count, type, op, comm_,
                              MPI_INFO_NULL, &s.request);
  });
  return slot ? start("all_reduce", std::move(slot), in, 1, out) : nullptr;
}

std::unique_ptr<NativeRequest> PersistentCollectives::reduce_scatter(const void* in, void* out,
                                                                     int count,
                                                                     MPI_Datatype type,
                                                                     size_t element_bytes,
                                                                     MPI_Op op) {
  const size_t block = static_cast<size_t>(count) * element_bytes;
  auto slot = slot_for(Key{CallKind::ReduceScatter, count, type, op, -1},
                       block * static_cast<size_t>(size_), block, [&](Slot& s) {
                         return MPI_Reduce_scatter_block_init(s.send.data(), s.recv.data(),
                                                              count, type, op, comm_,
                                                              MPI_INFO_NULL, &s.request);
                       });
  return slot ? start("reduce_scatter", std::move(slot), in, 1, out) : nullptr;
}

std::unique_ptr<NativeRequest> PersistentCollectives::broadcast(void* buf, int bytes, int root) {
  auto slot = slot_for(Key{CallKind::Broadcast, bytes, MPI_BYTE, MPI_OP_NULL, root},
                       static_cast<size_t>(bytes), 0, [&](Slot& s) {
                         s.result = s.send.data();
                         s.result_bytes = s.send.size();
                         return MPI_Bcast_init(s.send.data(), bytes, MPI_BYTE, root, comm_,
                                               MPI_INFO_NULL, &s.request);
                       });
  if (!slot) return nullptr;
  const bool is_root = rank_ == root;
  return start("broadcast", std::move(slot), is_root ? buf : nullptr, 1,
               is_root ? nullptr : buf);
}

std::shared_ptr<PersistentCollectives::Slot> PersistentCollectives::alltoall_slot(CallKind kind,
                                                                                   int block) {
  const size_t total = static_cast<size_t>(block) * static_cast<size_t>(size_);
  return slot_for(Key{kind, block, MPI_BYTE, MPI_OP_NULL, -1}, total, total, [&](Slot& s) {
    return MPI_Alltoall_init(s.send.data(), block, MPI_BYTE, s.recv.data(), block, MPI_BYTE,
                             comm_, MPI_INFO_NULL, &s.request);
  });
}

std::unique_ptr<NativeRequest> PersistentCollectives::all_gather(const void* in, void* out,
                                                                 int block) {
  auto slot = alltoall_slot(CallKind::AllGather, block);  // W copies of `in` to every rank
  return slot ? start("all_gather", std::move(slot), in, size_, out) : nullptr;
}

std::unique_ptr<NativeRequest> PersistentCollectives::all_to_all(const void* in, void* out,
                                                                 int block) {
  auto slot = alltoall_slot(CallKind::AllToAll, block);
  return slot ? start("all_to_all_single", std::move(slot), in, 1, out) : nullptr;
}

std::unique_ptr<NativeRequest> PersistentCollectives::barrier() {
  auto slot = slot_for(Key{CallKind::Barrier, 0, MPI_BYTE, MPI_OP_NULL, -1}, 0, 0, [&](Slot& s) {
    return MPI_Barrier_init(comm_, MPI_INFO_NULL, &s.request);
  });
  return slot ? start("barrier", std::move(slot), nullptr, 0, nullptr) : nullptr;
}

}  // namespace ferry::detail
