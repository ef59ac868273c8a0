#include <ferry/backends/mpi/mpi_call_key.h>

#include <ferry/backends/mpi/mpi_error.h>
#include <ferry/backends/mpi/mpi_request.h>
#include <ferry/backends/mpi/mpi_types.h>
#include <ferry/backends/mpi/mpi_wait.h>
#include <ferry/backends/mpi/mpi_world.h>
#include <ferry/runtime/error.h>

#include <algorithm>

namespace ferry::detail {
namespace {

constexpr int64_t kBytes = 100;  // MPI_BYTE, the data-movement ops' type
constexpr int64_t kNone = -1;

int64_t type_code(MPI_Datatype type) {
  if (type == MPI_BYTE) return kBytes;
  for (DType d : {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::UInt8})
    if (mpi_datatype(d) == type) return static_cast<int64_t>(d);
  return kNone;
}

int64_t op_code(MPI_Op op) {
  if (op == MPI_OP_NULL) return kNone;
  for (ReduceOp r : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max})
    if (mpi_op(r) == op) return static_cast<int64_t>(r);
  return kNone;
}

const char* kind_name(int64_t kind) {
  switch (static_cast<CallKind>(kind)) {
    case CallKind::AllReduce: return "all_reduce";
    case CallKind::Reduce: return "reduce";
    case CallKind::ReduceScatter: return "reduce_scatter";
    case CallKind::Broadcast: return "broadcast";
    case CallKind::AllGather: return "all_gather";
    case CallKind::AllToAll: return "all_to_all";
    case CallKind::Gather: return "gather";
    case CallKind::Scatter: return "scatter";
    case CallKind::Barrier: return "barrier";
  }
  return "an unknown collective";
}

// FNV-1a over the sizes: split lists that must agree, compared as one number.
uint64_t hash_sizes(const std::vector<size_t>& sizes) {
  uint64_t h = 1469598103934665603ull;
  for (size_t s : sizes) {
    uint64_t x = s;
    for (int b = 0; b < 8; ++b, x >>= 8) h = (h ^ (x & 0xff)) * 1099511628211ull;
  }
  return h == 0 ? 1 : h;
}

// splitmix64 of (sender, receiver, bytes): the terms of all_to_all's sums, spread over 64 bits
// so that sizes that differ do not cancel out by accident.
uint64_t pair_term(int from, int to, size_t bytes) {
  uint64_t x = (static_cast<uint64_t>(from) << 40) ^ (static_cast<uint64_t>(to) << 20) ^
               (static_cast<uint64_t>(bytes) * 0x9E3779B97F4A7C15ull);
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

CallKey base_key(CallKind kind, int64_t count, int64_t type, int64_t op, int root) {
  CallKey k;
  k.v[CallKey::kKind] = static_cast<int64_t>(kind);
  k.v[CallKey::kType] = type;
  k.v[CallKey::kOp] = op;
  k.v[CallKey::kRoot] = root;
  k.v[CallKey::kCount] = count;
  return k;
}

// "all_reduce of 100 float32 (sum)", "broadcast of 64 bytes from root 1", "gather to root 0".
std::string describe_key(const int64_t* k) {
  const int64_t kind = k[CallKey::kKind];
  std::string s = kind_name(kind);
  if (static_cast<CallKind>(kind) == CallKind::Barrier) return s;
  const int64_t count = k[CallKey::kCount], type = k[CallKey::kType];
  if (count >= 0) {
    s += str(" of ", count);
    if (type == kBytes)
      s += " bytes";
    else if (type >= 0 && type <= static_cast<int64_t>(DType::UInt8))
      s += str(" ", dtype_name(static_cast<DType>(type)));
  } else if (type >= 0 && type <= static_cast<int64_t>(DType::UInt8)) {
    s += str(" of ", dtype_name(static_cast<DType>(type)));
  }
  if (k[CallKey::kSplits] != 0)
    s += str(" with split sizes #", static_cast<uint64_t>(k[CallKey::kSplits]) % 100000);
  if (k[CallKey::kOp] != kNone)
    s += str(" (", reduce_op_name(static_cast<ReduceOp>(k[CallKey::kOp])), ")");
  if (count >= 0 && (static_cast<CallKind>(kind) == CallKind::ReduceScatter ||
                     static_cast<CallKind>(kind) == CallKind::AllGather))
    s += " per rank";
  const int64_t root = k[CallKey::kRoot];
  switch (static_cast<CallKind>(kind)) {
    case CallKind::Broadcast:
    case CallKind::Scatter: s += str(" from root ", root); break;
    case CallKind::Reduce:
    case CallKind::Gather: s += str(" to root ", root); break;
    default: break;
  }
  return s;
}

std::string list(const std::vector<int64_t>& values) {
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) s += str(i == 0 ? "" : ", ", values[i]);
  return s;
}

}  // namespace

CallKey agreed_key(CallKind kind, int64_t count, MPI_Datatype type, MPI_Op op, int root) {
  return base_key(kind, count, type_code(type), op_code(op), root);
}

CallKey split_key(CallKind kind, const std::vector<size_t>& sizes, MPI_Datatype type,
                  MPI_Op op) {
  const bool equal =
      std::all_of(sizes.begin(), sizes.end(), [&](size_t s) { return s == sizes[0]; });
  CallKey k = base_key(kind, equal ? static_cast<int64_t>(sizes[0]) : kNone, type_code(type),
                       op_code(op), -1);
  if (!equal) k.v[CallKey::kSplits] = static_cast<int64_t>(hash_sizes(sizes));
  return k;
}

CallKey rooted_key(CallKind kind, size_t own, const std::vector<size_t>* expected, int root) {
  CallKey k = base_key(kind, kNone, kBytes, kNone, root);
  k.v[CallKey::kOwn] = static_cast<int64_t>(own);
  if (expected != nullptr) k.v[CallKey::kCross] = static_cast<int64_t>(hash_sizes(*expected));
  return k;
}

CallKey all_to_all_key(int rank, const std::vector<size_t>& send,
                       const std::vector<size_t>& recv) {
  return all_to_all_key(rank, send.size(), send.data(), recv.data());
}

CallKey all_to_all_key(int rank, size_t size, const size_t* send, const size_t* recv) {
  // No agreed count: ranks may mix the equal form and the lists (the KJT all-to-all does).
  CallKey k = base_key(CallKind::AllToAll, kNone, kBytes, kNone, -1);
  uint64_t sent = 0, received = 0, out = 0, in = 0;
  for (size_t p = 0; p < size; ++p) {
    sent += send[p];
    received += recv[p];
    out += pair_term(rank, static_cast<int>(p), send[p]);
    in += pair_term(static_cast<int>(p), rank, recv[p]);
  }
  k.v[CallKey::kOwn] = static_cast<int64_t>(sent);
  k.v[CallKey::kOwn2] = static_cast<int64_t>(received);
  k.v[CallKey::kCross] = static_cast<int64_t>(out);
  k.v[CallKey::kCross2] = static_cast<int64_t>(in);
  return k;
}

CallKey all_to_all_key(int rank, int size, size_t block) {
  const std::vector<size_t> blocks(static_cast<size_t>(size), block);
  return all_to_all_key(rank, blocks, blocks);
}

KeyCheck::KeyCheck(MPI_Comm comm, int rank, int size, uint32_t group_id, const char* op,
                   const CallKey& mine, std::vector<size_t> expected)
    : rank_(rank), size_(size), group_id_(group_id), op_(op), comm_(comm), mine_(mine),
      expected_(std::move(expected)) {}

void KeyCheck::post() {
  constexpr int n = CallKey::kInts;
  int code = MPI_SUCCESS;
  const char* call = "MPI_Irecv";
  if (size_ <= kDirectRanks) {
    std::copy(mine_.v, mine_.v + n, all_small_ + static_cast<size_t>(rank_) * n);
    for (int p = 0; p < size_ && code == MPI_SUCCESS; ++p)
      if (p != rank_)
        code = MPI_Irecv(all_small_ + static_cast<size_t>(p) * n, n, MPI_INT64_T, p,
                         kKeyCheckTag, comm_, &requests_[posted_++]);
    for (int p = 0; p < size_ && code == MPI_SUCCESS; ++p)
      if (p != rank_) {
        call = "MPI_Isend";
        code = MPI_Isend(mine_.v, n, MPI_INT64_T, p, kKeyCheckTag, comm_, &requests_[posted_++]);
      }
  } else {
    call = "MPI_Iallgather";
    all_large_.resize(static_cast<size_t>(n) * static_cast<size_t>(size_));
    code = MPI_Iallgather(mine_.v, n, MPI_INT64_T, all_large_.data(), n, MPI_INT64_T, comm_,
                          &requests_[posted_++]);
  }
  // The description is put together only for the error: this runs on every collective.
  if (code != MPI_SUCCESS)
    check_mpi(code, call, str("the key check of ", op_, " on group ", group_id_));
}

const int64_t* KeyCheck::key_of(int r) const {
  const int64_t* all = size_ <= kDirectRanks ? all_small_ : all_large_.data();
  return all + static_cast<size_t>(r) * CallKey::kInts;
}

std::string KeyCheck::describe() const {
  return str(describe_key(mine_.v), " on group ", group_id_, " rank ", rank_, " of ", size_);
}

bool KeyCheck::test() {
  if (done_) return true;
  if (!mpi_usable()) {
    error_ = std::make_exception_ptr(TransportError(
        str("ferry: the key check of ", describe(), " was pending when MPI was finalized")));
    done_ = true;
    return true;
  }
  int flag = 0;
  const int code = MPI_Testall(posted_, requests_, &flag, MPI_STATUSES_IGNORE);
  if (code != MPI_SUCCESS) {
    error_ = std::make_exception_ptr(TransportError(
        str("ferry: the key check of ", describe(), " failed in MPI: ", mpi_error_string(code))));
    done_ = true;
    return true;
  }
  if (!flag) return false;
  error_ = compare();
  done_ = true;
  return true;
}

std::exception_ptr KeyCheck::compare() const {
  auto key = [&](int r) { return key_of(r); };
  std::string differ;
  for (int r = 0; r < size_; ++r) {
    if (std::equal(mine_.v, mine_.v + CallKey::kCompared, key(r))) continue;
    differ += str(", rank ", r, " ", describe_key(key(r)));
  }
  if (!differ.empty())
    return std::make_exception_ptr(MismatchError(
        str("ferry: ", describe(), ": the ranks called different collectives at this point: "
            "this rank ", describe_key(mine_.v), differ,
            " (the sizes, dtypes, reductions and roots must agree on every rank)")));

  // The same call everywhere; now the sizes that differ per peer by design.
  auto own = [&] {
    std::vector<int64_t> v(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) v[static_cast<size_t>(r)] = key(r)[CallKey::kOwn];
    return v;
  };
  const auto kind = static_cast<CallKind>(mine_.v[CallKey::kKind]);
  if (kind == CallKind::Gather || kind == CallKind::Scatter) {
    const int root = static_cast<int>(mine_.v[CallKey::kRoot]);
    const std::vector<int64_t> sizes = own();
    std::vector<size_t> given(sizes.begin(), sizes.end());
    if (static_cast<int64_t>(hash_sizes(given)) == key(root)[CallKey::kCross]) return nullptr;
    const bool gather = kind == CallKind::Gather;
    std::string expected;
    if (rank_ == root) {
      std::vector<int64_t> e(expected_.begin(), expected_.end());
      expected = str(" (root ", root, " ", gather ? "expects " : "sends ", list(e), ")");
    }
    return std::make_exception_ptr(MismatchError(
        str("ferry: ", describe(), ": the ranks ", gather ? "send " : "expect ", list(sizes),
            " bytes ", gather ? "to" : "from", " root ", root,
            ", which is not what the root ", gather ? "expects from" : "sends to", " them",
            expected, " (the sizes of every rank's block must agree with the root's)")));
  }
  if (kind == CallKind::AllToAll) {
    uint64_t out = 0, in = 0;
    for (int r = 0; r < size_; ++r) {
      out += static_cast<uint64_t>(key(r)[CallKey::kCross]);
      in += static_cast<uint64_t>(key(r)[CallKey::kCross2]);
    }
    if (out == in) return nullptr;
    std::string each;
    for (int r = 0; r < size_; ++r)
      each += str(r == 0 ? "" : ", ", "rank ", r, " sends ", key(r)[CallKey::kOwn],
                  " bytes and expects ", key(r)[CallKey::kOwn2]);
    return std::make_exception_ptr(MismatchError(
        str("ferry: ", describe(), ": the bytes the ranks send do not match what their peers "
            "expect to receive (in all: ", each,
            "; every rank's send size to a peer must be that peer's receive size from it)")));
  }
  return nullptr;
}

CheckedRequest::CheckedRequest(std::shared_ptr<KeyCheck> check, std::unique_ptr<NativeRequest> op,
                               std::shared_ptr<MpiGroupComms> comms)
    : check_(std::move(check)), op_(std::move(op)), comms_(std::move(comms)) {}

CheckedRequest::~CheckedRequest() {
  // MPI still owns the buffers of a comparison that never finished (the op timed out).
  if (check_ && !check_->finished()) keep_forever(std::move(check_));
}

bool CheckedRequest::test() {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_) return true;
  if (!check_->test()) {
    op_->test();  // the op moves on meanwhile (the point-to-point rounds step in test)
    return false;
  }
  if (const std::exception_ptr& mismatch = check_->outcome()) {
    // What the op did (wrong data, a truncation on one rank only) is not reported: every rank
    // fails alike with the comparison's error.
    error_ = mismatch;
    done_ = true;
    if (!op_->test()) {
      comms_->stuck.store(true);
      op_->give_up();
      keep_forever(std::shared_ptr<NativeRequest>(std::move(op_)));
    }
    return true;
  }
  if (!op_->test()) return false;
  done_ = true;
  return true;
}

bool CheckedRequest::wait_until(Clock::time_point deadline) {
  return wait_polling_mpi([this] { return test(); }, first_wait_, deadline);
}

void CheckedRequest::rethrow_if_failed() {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
  if (op_) op_->rethrow_if_failed();
}

void CheckedRequest::give_up() {
  std::lock_guard<std::mutex> lock(mu_);
  if (op_) op_->give_up();
}

}  // namespace ferry::detail
