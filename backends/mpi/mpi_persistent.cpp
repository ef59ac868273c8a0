#include <ferry/backends/mpi/mpi_persistent.h>

#include <ferry/backends/mpi/mpi_error.h>
#include <ferry/backends/mpi/mpi_exchange.h>
#include <ferry/backends/mpi/mpi_types.h>
#include <ferry/backends/mpi/mpi_wait.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::detail {
namespace {

enum Kind { kAllReduce, kReduceScatter, kBroadcast, kAllGather, kAllToAll, kBarrier };

// A key as integers every rank reads alike (MPI's handles need not be): kind, count, datatype,
// reduction, root.
constexpr int kKeyInts = 5;
constexpr int32_t kBytes = 100;  // MPI_BYTE, the data-movement ops' type
constexpr int32_t kNone = -1;

int32_t type_code(MPI_Datatype type) {
  if (type == MPI_BYTE) return kBytes;
  for (DType d : {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::UInt8})
    if (mpi_datatype(d) == type) return static_cast<int32_t>(d);
  return kNone;
}

int32_t op_code(MPI_Op op) {
  for (ReduceOp r : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max})
    if (op != MPI_OP_NULL && mpi_op(r) == op) return static_cast<int32_t>(r);
  return kNone;
}

const char* kind_name(int32_t kind) {
  switch (kind) {
    case kAllReduce: return "all_reduce";
    case kReduceScatter: return "reduce_scatter";
    case kBroadcast: return "broadcast";
    case kAllGather: return "all_gather";
    case kAllToAll: return "all_to_all";
    case kBarrier: return "barrier";
    default: return "an unknown collective";
  }
}

// "all_reduce of 100 float32 (sum)", "broadcast of 64 bytes from root 1".
std::string describe_key(const int32_t* k) {
  std::string s = kind_name(k[0]);
  if (k[0] == kBarrier) return s;
  s += str(" of ", k[1]);
  if (k[2] == kBytes) {
    s += " bytes";
  } else if (k[2] >= 0 && k[2] <= static_cast<int32_t>(DType::UInt8)) {
    s += str(" ", dtype_name(static_cast<DType>(k[2])));
  }
  if (k[3] != kNone) s += str(" (", reduce_op_name(static_cast<ReduceOp>(k[3])), ")");
  if (k[0] == kBroadcast) s += str(" from root ", k[4]);
  return s;
}

}  // namespace

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
  // The key check (see the header): every rank's key, gathered when the slot was created. Until
  // it finished and agreed, the request is not started; a slot whose keys differed never is.
  MPI_Request check = MPI_REQUEST_NULL;
  int32_t key[kKeyInts] = {};
  std::vector<int32_t> keys;  // kKeyInts per rank
  bool checked = false;
  std::string describe;       // "... on group G rank R of W", for the check's messages
  std::exception_ptr mismatch;  // the check found different keys

  ~Slot() {
    // A slot still in flight belongs to a request that was given up (kept forever).
    if (request != MPI_REQUEST_NULL && !in_flight && mpi_usable()) MPI_Request_free(&request);
  }

  // True once the key check finished (then `checked`, or `mismatch` set). Called with `mu`.
  bool poll_check() {
    if (checked || mismatch) return true;
    int flag = 0;
    const int code = MPI_Test(&check, &flag, MPI_STATUS_IGNORE);
    if (code != MPI_SUCCESS) {
      mismatch = std::make_exception_ptr(TransportError(
          str("ferry: the key check of ", describe, " failed in MPI: ", mpi_error_string(code))));
      return true;
    }
    if (!flag) return false;
    const int ranks = static_cast<int>(keys.size()) / kKeyInts;
    for (int r = 0; r < ranks; ++r) {
      const int32_t* theirs = keys.data() + static_cast<size_t>(r) * kKeyInts;
      if (std::equal(key, key + kKeyInts, theirs)) continue;
      mismatch = std::make_exception_ptr(MismatchError(str(
          "ferry: ", describe, ": the ranks called different collectives at this point: this "
          "rank ", describe_key(key), ", rank ", r, " ", describe_key(theirs),
          " (the sizes, dtypes, reductions and roots must agree on every rank)")));
      return true;
    }
    checked = true;
    return true;
  }

  // True once op `ticket` finished; the result is then at its destination. Called with `mu`.
  bool poll(uint64_t ticket) {
    if (ticket != newest || !in_flight) return true;  // older ops finished before newer began
    if (!mpi_usable()) return finish_with(TransportError(
        "ferry: a persistent MPI collective was still pending when MPI was finalized"));
    if (!checked) {
      // The first op of the slot starts once every rank's key is known to agree.
      if (!poll_check()) return false;
      if (mismatch) return finish_with(mismatch);
      const int code = MPI_Start(&request);
      if (code != MPI_SUCCESS)
        return finish_with(std::make_exception_ptr(TransportError(
            str("ferry: MPI_Start of ", describe, " failed: ", mpi_error_string(code)))));
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

class PersistentRequest final : public NativeRequest {
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

 private:
  std::shared_ptr<PersistentCollectives::Slot> slot_;
  uint64_t ticket_;
  bool done_ = false;  // guarded by the slot's mutex, as is error_
  std::exception_ptr error_;
  Clock::time_point first_wait_{};
};



bool enabled_by_environment() { return config().mpi_persistent; }

}  // namespace

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
  const int32_t mine[kKeyInts] = {key.kind, key.count, type_code(key.type), op_code(key.op),
                                  key.root};
  std::copy(mine, mine + kKeyInts, slot.key);
  slot.keys.assign(static_cast<size_t>(kKeyInts) * static_cast<size_t>(size_), 0);
  slot.describe = str(describe_key(mine), " on group ", group_id_, " rank ", rank_, " of ", size_);
  check_mpi(MPI_Iallgather(slot.key, kKeyInts, MPI_INT32_T, slot.keys.data(), kKeyInts,
                           MPI_INT32_T, comm_, &slot.check),
            "MPI_Iallgather", str("the key check of ", slot.describe));
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
  // An unchecked slot starts in poll(), once the check agreed.
  const int code = slot->checked ? MPI_Start(&slot->request) : MPI_SUCCESS;
  if (code != MPI_SUCCESS) {
    slot->failed_ticket = ticket;
    check_mpi(code, "MPI_Start", str(what, " on group ", group_id_));
  }
  slot->destination = out;
  slot->in_flight = true;
  return std::make_unique<PersistentRequest>(std::move(slot), ticket);
}

std::unique_ptr<NativeRequest> PersistentCollectives::all_reduce(const void* in, void* out,
                                                                 int count, MPI_Datatype type,
                                                                 size_t element_bytes,
                                                                 MPI_Op op) {
  const size_t bytes = static_cast<size_t>(count) * element_bytes;
  auto slot = slot_for(Key{kAllReduce, count, type, op, 0}, bytes, bytes, [&](Slot& s) {
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
  auto slot = slot_for(Key{kReduceScatter, count, type, op, 0},
                       block * static_cast<size_t>(size_), block, [&](Slot& s) {
                         return MPI_Reduce_scatter_block_init(s.send.data(), s.recv.data(),
                                                              count, type, op, comm_,
                                                              MPI_INFO_NULL, &s.request);
                       });
  return slot ? start("reduce_scatter", std::move(slot), in, 1, out) : nullptr;
}

std::unique_ptr<NativeRequest> PersistentCollectives::broadcast(void* buf, int bytes, int root) {
  auto slot = slot_for(Key{kBroadcast, bytes, MPI_BYTE, MPI_OP_NULL, root},
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

std::shared_ptr<PersistentCollectives::Slot> PersistentCollectives::alltoall_slot(int kind,
                                                                                   int block) {
  const size_t total = static_cast<size_t>(block) * static_cast<size_t>(size_);
  return slot_for(Key{kind, block, MPI_BYTE, MPI_OP_NULL, 0}, total, total, [&](Slot& s) {
    return MPI_Alltoall_init(s.send.data(), block, MPI_BYTE, s.recv.data(), block, MPI_BYTE,
                             comm_, MPI_INFO_NULL, &s.request);
  });
}

std::unique_ptr<NativeRequest> PersistentCollectives::all_gather(const void* in, void* out,
                                                                 int block) {
  auto slot = alltoall_slot(kAllGather, block);  // W copies of `in` to every rank
  return slot ? start("all_gather", std::move(slot), in, size_, out) : nullptr;
}

std::unique_ptr<NativeRequest> PersistentCollectives::all_to_all(const void* in, void* out,
                                                                 int block) {
  auto slot = alltoall_slot(kAllToAll, block);
  return slot ? start("all_to_all_single", std::move(slot), in, 1, out) : nullptr;
}

std::unique_ptr<NativeRequest> PersistentCollectives::barrier() {
  auto slot = slot_for(Key{kBarrier, 0, MPI_BYTE, MPI_OP_NULL, 0}, 0, 0, [&](Slot& s) {
    return MPI_Barrier_init(comm_, MPI_INFO_NULL, &s.request);
  });
  return slot ? start("barrier", std::move(slot), nullptr, 0, nullptr) : nullptr;
}

}  // namespace ferry::detail
