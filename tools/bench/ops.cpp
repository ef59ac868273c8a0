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
    {OpKind::Barrier, "barrier"},     {OpKind::Memcpy, "memcpy"},
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
  if (op == OpKind::Barrier) return 0;  // moves nothing: timed once, whatever the sizes
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
    case OpKind::Barrier:
    case OpKind::Memcpy: return 1;
  }
  return 1;
}

double ideal_bytes(OpKind op, size_t bytes, int world_size, Place place) {
  const double w = world_size, size = static_cast<double>(bytes);
  if (op == OpKind::Memcpy) return size;
  if (world_size < 2) return 0;
  // (bytes read + bytes written) / 2 per rank: ops.h says why each.
  switch (op) {
    case OpKind::AllReduce:
    case OpKind::AllToAll: return size;
    case OpKind::ReduceScatter:
    case OpKind::Reduce: return (size + size / w) / 2;
    case OpKind::AllGather:
      return place == Place::InPlace ? size / 2 : (size / w + size) / 2;
    case OpKind::Broadcast: return size / 2;
    case OpKind::Barrier:
    case OpKind::Memcpy: break;
  }
  return 0;
}

std::string algorithm_for(OpKind op, int64_t count, DType dtype, int world_size, bool native,
                          Placement placement) {
  const int64_t input_count = op == OpKind::AllGather ? count / world_size : count;
  const size_t bytes = static_cast<size_t>(input_count) * dtype_size(dtype);
  auto name = [&](Collective c) {
    return std::string(algorithm_name(choose_algorithm(c, bytes, world_size, native, placement)));
  };
  switch (op) {
    case OpKind::AllReduce: return name(Collective::AllReduce);
    case OpKind::AllGather: return name(Collective::AllGather);
    case OpKind::ReduceScatter: return name(Collective::ReduceScatter);
    case OpKind::AllToAll: return name(Collective::AllToAll);
    case OpKind::Broadcast: return name(Collective::Broadcast);
    case OpKind::Reduce: return name(Collective::Reduce);
    case OpKind::Barrier: return name(Collective::Barrier);
    case OpKind::Memcpy: return "memcpy";
  }
  return "?";
}

std::optional<Collective> collective_of(OpKind op) {
  switch (op) {
    case OpKind::AllReduce: return Collective::AllReduce;
    case OpKind::AllGather: return Collective::AllGather;
    case OpKind::ReduceScatter: return Collective::ReduceScatter;
    case OpKind::AllToAll: return Collective::AllToAll;
    case OpKind::Broadcast: return Collective::Broadcast;
    case OpKind::Reduce: return Collective::Reduce;
    case OpKind::Barrier: return Collective::Barrier;
    case OpKind::Memcpy: break;
  }
  return std::nullopt;
}

const char* place_name(Place place) { return place == Place::InPlace ? "in" : "out"; }

const char* memory_name(Memory memory) { return memory == Memory::Shared ? "shared" : "private"; }

std::vector<Place> places_of(OpKind op) {
  switch (op) {
    case OpKind::AllReduce:
    case OpKind::AllGather:
    case OpKind::ReduceScatter:
    case OpKind::Reduce: return {Place::OutOfPlace, Place::InPlace};
    case OpKind::Broadcast: return {Place::InPlace};  // ferry's broadcast has no output tensor
    case OpKind::AllToAll:
    case OpKind::Barrier:
    case OpKind::Memcpy: return {Place::OutOfPlace};
  }
  return {Place::OutOfPlace};
}

// ---- OpCase ----

namespace {
// Written into outputs by reset(): outside 1..101 and every sum of those, in every dtype
// (uint8 included), so a result that was never written cannot pass.
constexpr double kUnwritten = 0;
// What --test-corrupt writes: 0 is never a right value either (every expected value is >= 1
// before wrapping, and the ones that wrap are checked against their wrapped value).
constexpr double kCorrupted = 0;
}  // namespace

OpCase::OpCase(OpKind op, int64_t count, DType dtype, const Group& group, Place place,
               Memory memory)
    : op_(op), count_(count), dtype_(dtype), group_(group), place_(place),
      block_(splits_in_blocks(op) ? count / group.size() : count) {
  FERRY_CHECK(op != OpKind::Memcpy, InvalidArgument, "OpCase: memcpy is measured by MemcpyCase");
  const std::vector<Place> forms = places_of(op);
  FERRY_CHECK(std::find(forms.begin(), forms.end(), place) != forms.end(), InvalidArgument,
              "OpCase: ", op_name(op), " has no ", place_name(place), "-of-place form");
  const int me = group.rank();
  const bool in = place == Place::InPlace;
  auto buffer = [&](int64_t n) {
    return memory == Memory::Shared ? empty_shared({n}, dtype) : empty({n}, dtype);
  };
  switch (op) {
    case OpKind::AllReduce:
      input_ = buffer(count);
      output_ = in ? input_ : buffer(count);
      break;
    case OpKind::AllGather:
      output_ = buffer(count);
      input_ = in ? output_.narrow(0, me * block_, block_) : buffer(block_);
      break;
    case OpKind::ReduceScatter:
      input_ = buffer(count);
      output_ = in ? input_.narrow(0, me * block_, block_) : buffer(block_);
      break;
    case OpKind::AllToAll:
      input_ = buffer(count);
      output_ = buffer(count);
      break;
    case OpKind::Broadcast:
      input_ = buffer(count);
      output_ = input_;
      break;
    case OpKind::Reduce:
      input_ = buffer(count);
      // Non-roots pass no output (allowed by the contract), as a real caller would.
      if (me == kRoot) output_ = in ? input_ : buffer(count);
      break;
    case OpKind::Barrier:  // no tensor
    case OpKind::Memcpy: break;
  }
  reset();
}

void OpCase::fill_inputs() {
  const int world = group_.size();
  const int me = group_.rank();
  switch (op_) {
    case OpKind::AllReduce:
    case OpKind::AllGather:
    case OpKind::Reduce: input_.fill_(rank_value(me)); break;
    case OpKind::ReduceScatter:
    case OpKind::AllToAll:
      for (int j = 0; j < world && block_ > 0; ++j)
        input_.narrow(0, j * block_, block_).fill_(block_value(me, j, world));
      break;
    case OpKind::Broadcast: input_.fill_(me == kRoot ? kBroadcastValue : kUnwritten); break;
    case OpKind::Barrier:
    case OpKind::Memcpy: break;
  }
}

void OpCase::reset() {
  // Outputs first: in place they share storage with the inputs, which must win.
  if (output_.defined()) output_.fill_(kUnwritten);
  fill_inputs();
}

Work OpCase::launch() {
  const bool in = place_ == Place::InPlace;
  switch (op_) {
    case OpKind::AllReduce: return in ? all_reduce(input_, group_) : all_reduce(input_, output_, group_);
    case OpKind::AllGather: return all_gather(input_, output_, group_);
    case OpKind::ReduceScatter: return reduce_scatter(input_, output_, group_);
    case OpKind::AllToAll: return all_to_all_single(input_, output_, group_);
    case OpKind::Broadcast: return broadcast(input_, kRoot, group_);
    case OpKind::Reduce: return reduce(input_, output_, kRoot, group_);
    case OpKind::Barrier: return barrier(group_);
    case OpKind::Memcpy: break;
  }
  FERRY_THROW(InvalidArgument, "OpCase::launch: unexpected op ", op_name(op_));
}

double OpCase::expected_at(int64_t i) const {
  if (block_ == 0) return 0;  // no element to check (a count rounded down to 0)
  const int world = group_.size();
  const int me = group_.rank();
  int64_t rank_sum = 0;
  for (int r = 0; r < world; ++r) rank_sum += static_cast<int64_t>(rank_value(r));
  switch (op_) {
    case OpKind::AllReduce:
    case OpKind::Reduce: return as_stored(rank_sum, dtype_);
    case OpKind::Broadcast: return kBroadcastValue;
    case OpKind::ReduceScatter: {
      int64_t sum = 0;
      for (int r = 0; r < world; ++r) sum += static_cast<int64_t>(block_value(r, me, world));
      return as_stored(sum, dtype_);
    }
    case OpKind::AllGather: return rank_value(static_cast<int>(i / block_));
    case OpKind::AllToAll: return block_value(static_cast<int>(i / block_), me, world);
    case OpKind::Barrier:
    case OpKind::Memcpy: break;
  }
  return 0;
}

std::string OpCase::check_range(const Tensor& t, int64_t begin, int64_t end, double expected,
                                const std::string& what) const {
  if (begin >= end) return "";
  for (int64_t i : {begin, begin + (end - begin) / 2, end - 1}) {
    const double got = t.get_flat(i);
    if (!(got == expected)) {
      std::ostringstream os;
      os << op_name(op_) << " (" << place_name(place_) << " of place) of " << count_ << " "
         << dtype_name(dtype_) << " on rank " << group_.rank() << ": element " << i << what
         << " is " << got << ", expected " << expected;
      return os.str();
    }
  }
  return "";
}

std::string OpCase::check() const {
  if (!output_.defined()) return "";  // reduce on a non-root: nothing arrives here
  const int64_t n = output_.numel();
  const bool by_block = op_ == OpKind::AllGather || op_ == OpKind::AllToAll;
  if (!by_block) return check_range(output_, 0, n, expected_at(0), "");
  for (int k = 0; k < group_.size(); ++k) {
    std::string err = check_range(output_, k * block_, (k + 1) * block_, expected_at(k * block_),
                                  " (block from rank " + std::to_string(k) + ")");
    if (!err.empty()) return err;
  }
  return "";
}

int64_t OpCase::count_wrong() const {
  if (!output_.defined()) return 0;
  const int64_t n = output_.numel();
  int64_t wrong = 0;
  // The expected value is constant within a block: look it up once per block.
  const int64_t step = block_ > 0 ? block_ : n;
  for (int64_t begin = 0; begin < n; begin += step) {
    const int64_t end = std::min(n, begin + step);
    const double expected = expected_at(begin);
    for (int64_t i = begin; i < end; ++i)
      if (!(output_.get_flat(i) == expected)) ++wrong;
  }
  return wrong;
}

void OpCase::corrupt_for_test(int64_t n) {
  if (!output_.defined()) return;
  const int64_t total = output_.numel();
  n = std::min(n, total);
  // Spread over the output, so blocks from several ranks are hit.
  for (int64_t k = 0; k < n; ++k) output_.set_flat(k * total / n, kCorrupted);
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

int64_t MemcpyCase::count_wrong() {
  auto* d = static_cast<unsigned char*>(dst_.raw_data());
  if (bytes_ == 0) return 0;
  std::memset(d, 0, bytes_);
  g_copy(d, src_.raw_data(), bytes_);
  return static_cast<int64_t>(std::count_if(d, d + bytes_, [](unsigned char c) { return c != 7; }));
}

std::string MemcpyCase::check() const {
  if (bytes_ == 0) return "";
  const auto* d = static_cast<const unsigned char*>(dst_.raw_data());
  if (d[0] != 7 || d[bytes_ - 1] != 7) return "memcpy of " + std::to_string(bytes_) + " B: wrong bytes";
  return "";
}

}  // namespace ferry::bench
