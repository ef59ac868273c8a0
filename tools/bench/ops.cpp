#include "tools/bench/ops.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <sstream>
#include <type_traits>

namespace ferry::bench {
namespace {

struct OpEntry {
  OpKind op;
  const char* name;
};

constexpr OpEntry kOps[] = {
    {OpKind::AllReduce, "all_reduce"}, {OpKind::AllGather, "all_gather"},
    {OpKind::ReduceScatter, "reduce_scatter"}, {OpKind::AllToAll, "all_to_all"},
    {OpKind::Broadcast, "broadcast"}, {OpKind::Reduce, "reduce"},
    {OpKind::Memcpy, "memcpy"},
};

// Ops whose buffer is cut into one block per rank.
bool splits_in_blocks(OpKind op) {
  return op == OpKind::AllGather || op == OpKind::ReduceScatter || op == OpKind::AllToAll;
}

// Input values stay within 1..101 so every dtype (uint8, bfloat16's 8-bit mantissa) holds them
// exactly; the check is then exact instead of tolerance-based.
double rank_value(int rank) { return 1 + rank % 101; }
double block_value(int src, int dst, int world) { return 1 + (int64_t{src} * world + dst) % 101; }
constexpr double kBroadcastValue = 42;

// What an exact integer sum looks like after the runtime stored it in `dtype`: floats round once
// (the runtime accumulates float16/bfloat16 in float32 and rounds at the end), integers wrap.
double as_stored(int64_t exact_sum, DType dtype) {
  if (is_floating(dtype)) return full({1}, static_cast<double>(exact_sum), dtype).get_flat(0);
  return visit_dtype(dtype, [&]<class T>() -> double {
    if constexpr (std::is_integral_v<T>)
      return static_cast<double>(static_cast<T>(static_cast<uint64_t>(exact_sum)));
    else
      return static_cast<double>(exact_sum);  // unreachable: floats are handled above
  });
}

std::string normalized(std::string_view name) {
  std::string out;
  for (char c : name)
    if (c != '_' && c != '-') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

const std::vector<OpKind>& all_ops() {
  static const std::vector<OpKind> ops = [] {
    std::vector<OpKind> v;
    for (const OpEntry& e : kOps) v.push_back(e.op);
    return v;
  }();
  return ops;
}

const char* op_name(OpKind op) {
  for (const OpEntry& e : kOps)
    if (e.op == op) return e.name;
  return "?";
}

std::optional<OpKind> op_from_name(std::string_view name) {
  // nccl-tests users type "allreduce", "alltoall": accept the names without separators too.
  const std::string wanted = normalized(name);
  for (const OpEntry& e : kOps)
    if (normalized(e.name) == wanted) return e.op;
  return std::nullopt;
}

std::string op_names() {
  std::string s;
  for (const OpEntry& e : kOps) s += std::string(s.empty() ? "" : ", ") + e.name;
  return s;
}

int64_t element_count(OpKind op, size_t bytes, DType dtype, int world_size) {
  int64_t n = static_cast<int64_t>(bytes / dtype_size(dtype));
  if (splits_in_blocks(op)) n -= n % world_size;
  return n;
}

double bus_factor(OpKind op, int world_size) {
  const double w = world_size;
  switch (op) {
    case OpKind::AllReduce: return 2 * (w - 1) / w;
    case OpKind::AllGather:
    case OpKind::ReduceScatter:
    case OpKind::AllToAll: return (w - 1) / w;
    case OpKind::Broadcast:
    case OpKind::Reduce:
    case OpKind::Memcpy: return 1;
  }
  return 1;
}

std::string algorithm_for(OpKind op, int64_t count, DType dtype, int world_size) {
  const int64_t input_count = op == OpKind::AllGather ? count / world_size : count;
  const size_t bytes = static_cast<size_t>(input_count) * dtype_size(dtype);
  switch (op) {
    case OpKind::AllReduce: return choose_algorithm(Collective::AllReduce, bytes, world_size);
    case OpKind::AllGather: return choose_algorithm(Collective::AllGather, bytes, world_size);
    case OpKind::ReduceScatter:
      return choose_algorithm(Collective::ReduceScatter, bytes, world_size);
    case OpKind::AllToAll: return choose_algorithm(Collective::AllToAll, bytes, world_size);
    case OpKind::Broadcast: return choose_algorithm(Collective::Broadcast, bytes, world_size);
    case OpKind::Reduce: return choose_algorithm(Collective::Reduce, bytes, world_size);
    case OpKind::Memcpy: return "memcpy";
  }
  return "?";
}

// ---- OpCase ----

OpCase::OpCase(OpKind op, int64_t count, DType dtype, const Group& group)
    : op_(op), count_(count), dtype_(dtype), group_(group) {
  FERRY_CHECK(op != OpKind::Memcpy, InvalidArgument, "OpCase: memcpy is measured by MemcpyCase");
  const int world = group.size();
  const int me = group.rank();
  const int64_t block = splits_in_blocks(op) ? count / world : count;
  auto blocks_by_destination = [&] {
    Tensor t = empty({count}, dtype);
    for (int j = 0; j < world && block > 0; ++j)
      t.narrow(0, j * block, block).fill_(block_value(me, j, world));
    return t;
  };
  switch (op) {
    case OpKind::AllReduce:
      input_ = full({count}, rank_value(me), dtype);
      output_ = zeros({count}, dtype);
      break;
    case OpKind::AllGather:
      input_ = full({block}, rank_value(me), dtype);
      output_ = zeros({count}, dtype);
      break;
    case OpKind::ReduceScatter:
      input_ = blocks_by_destination();
      output_ = zeros({block}, dtype);
      break;
    case OpKind::AllToAll:
      input_ = blocks_by_destination();
      output_ = zeros({count}, dtype);
      break;
    case OpKind::Broadcast:
      input_ = me == kRoot ? full({count}, kBroadcastValue, dtype) : zeros({count}, dtype);
      output_ = input_;
      break;
    case OpKind::Reduce:
      input_ = full({count}, rank_value(me), dtype);
      // Non-roots pass no output (allowed by the contract), as a real caller would.
      if (me == kRoot) output_ = zeros({count}, dtype);
      break;
    case OpKind::Memcpy: break;
  }
}

Work OpCase::launch() {
  switch (op_) {
    case OpKind::AllReduce: return all_reduce(input_, output_, group_);
    case OpKind::AllGather: return all_gather(input_, output_, group_);
    case OpKind::ReduceScatter: return reduce_scatter(input_, output_, group_);
    case OpKind::AllToAll: return all_to_all_single(input_, output_, group_);
    case OpKind::Broadcast: return broadcast(input_, kRoot, group_);
    case OpKind::Reduce: return reduce(input_, output_, kRoot, group_);
    case OpKind::Memcpy: break;
  }
  FERRY_THROW(InvalidArgument, "OpCase::launch: unexpected op ", op_name(op_));
}

std::string OpCase::check_range(const Tensor& t, int64_t begin, int64_t end, double expected,
                                const std::string& what) const {
  if (begin >= end) return "";
  for (int64_t i : {begin, begin + (end - begin) / 2, end - 1}) {
    const double got = t.get_flat(i);
    if (!(got == expected)) {
      std::ostringstream os;
      os << op_name(op_) << " of " << count_ << " " << dtype_name(dtype_) << " on rank "
         << group_.rank() << ": element " << i << what << " is " << got << ", expected "
         << expected;
      return os.str();
    }
  }
  return "";
}

std::string OpCase::check() const {
  const int world = group_.size();
  const int me = group_.rank();
  const int64_t block = splits_in_blocks(op_) ? count_ / world : count_;
  int64_t rank_sum = 0;
  for (int r = 0; r < world; ++r) rank_sum += static_cast<int64_t>(rank_value(r));
  switch (op_) {
    case OpKind::AllReduce:
      return check_range(output_, 0, count_, as_stored(rank_sum, dtype_), "");
    case OpKind::Reduce:
      if (me != kRoot) return "";
      return check_range(output_, 0, count_, as_stored(rank_sum, dtype_), "");
    case OpKind::Broadcast:
      return check_range(output_, 0, count_, kBroadcastValue, "");
    case OpKind::ReduceScatter: {
      int64_t sum = 0;
      for (int r = 0; r < world; ++r) sum += static_cast<int64_t>(block_value(r, me, world));
      return check_range(output_, 0, block, as_stored(sum, dtype_), "");
    }
    case OpKind::AllGather:
    case OpKind::AllToAll:
      for (int k = 0; k < world; ++k) {
        const double expected =
            op_ == OpKind::AllGather ? rank_value(k) : block_value(k, me, world);
        std::string err = check_range(output_, k * block, (k + 1) * block, expected,
                                      " (block from rank " + std::to_string(k) + ")");
        if (!err.empty()) return err;
      }
      return "";
    case OpKind::Memcpy: break;
  }
  return "";
}

// ---- MemcpyCase ----

namespace {
// Called through a volatile pointer so the compiler can neither drop the repeated copies into
// a buffer nobody reads nor turn a small one into a couple of register moves.
void* (*volatile g_copy)(void*, const void*, size_t) = std::memcpy;
constexpr size_t kMemcpyBytesPerSample = 256 * 1024;
constexpr int kMemcpyMaxReps = 4096;
}  // namespace

MemcpyCase::MemcpyCase(size_t bytes)
    : bytes_(bytes),
      reps_(static_cast<int>(std::clamp<size_t>(
          bytes == 0 ? kMemcpyMaxReps : kMemcpyBytesPerSample / bytes, 1, kMemcpyMaxReps))),
      src_(full({static_cast<int64_t>(bytes)}, 7, DType::UInt8)),
      dst_(zeros({static_cast<int64_t>(bytes)}, DType::UInt8)) {}

double MemcpyCase::time_one_seconds() {
  void* dst = dst_.raw_data();
  const void* src = src_.raw_data();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps_; ++i) g_copy(dst, src, bytes_);
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count() / reps_;
}

std::string MemcpyCase::check() const {
  if (bytes_ == 0) return "";
  const auto* d = static_cast<const unsigned char*>(dst_.raw_data());
  if (d[0] != 7 || d[bytes_ - 1] != 7) return "memcpy of " + std::to_string(bytes_) + " B: wrong bytes";
  return "";
}

}  // namespace ferry::bench
