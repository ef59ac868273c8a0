// Shared helpers of the collective tests: deterministic per-rank data, sequential references,
// a thread-safe failure collector for rank threads, and scoped settings.
//
// Catch2's assertion macros are not thread-safe, so code running on rank threads never uses
// them: it records into a Ctx, and run_checked() turns the collected results into Catch2
// assertions on the main thread after run_ranks returned (or threw).
#pragma once

#include <ferry/collectives/algorithm_table.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/group.h>
#include <ferry/collectives/run_ranks.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/dtype.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/tensor.h>
#include <ferry/runtime/work.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

namespace ftest {

using ferry::DType;
using ferry::Group;
using ferry::ReduceOp;
using ferry::Shape;
using ferry::Tensor;
using ferry::Work;

inline constexpr int64_t kLarge = int64_t{1} << 20;  // the ">= 1M elements" case

// ---------------------------------------------------------------------------------------------
// Deterministic data.
//
// Every value is a small integer, so it is exactly representable in every dtype (bfloat16 holds
// the integers up to 256 exactly, float16 up to 2048) and every sum, min, max and product of up
// to 8 ranks is exact too: the references below are then exact, whatever order the library
// reduces in. Only Avg needs a tolerance.
enum class Pattern {
  Move,   // wide range, for data movement: identifies (rank, index) well
  Small,  // [-5, 5] ([0, 10] for uint8): for Sum, Avg, Min, Max (|sum of 8| <= 40)
  Prod,   // {±1, ±2, ±3} with at most four non-unit factors per index across 8 ranks (|p| <= 16)
};

Pattern pattern_for(ReduceOp op);

inline uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Value number `i` (flat index) of rank `rank`'s data; `salt` varies the data between ops.
// Inline and division-free: the 1M-element cases generate a lot of these.
class Gen {
 public:
  Gen(Pattern pattern, DType dtype, int rank, uint64_t salt = 0);
  double operator()(int64_t i) const {
    if (pattern_ == Pattern::Prod) return prod_value(i);
    const uint64_t h = mix64(seed_ + static_cast<uint64_t>(i) * 0xD6E8FEB86659FD93ull) >> 32;
    return static_cast<double>((h * range_) >> 32) + offset_;  // uniform in [0, range) + offset
  }

 private:
  double prod_value(int64_t i) const;

  Pattern pattern_;
  DType dtype_;
  int rank_;
  uint64_t salt_;
  uint64_t seed_;
  uint64_t range_ = 1;
  double offset_ = 0.0;
};

std::vector<double> gen_values(const Gen& gen, int64_t offset, int64_t n);
// A new tensor of `shape` whose flat element t is gen(offset + t).
Tensor make_tensor(const Gen& gen, const Shape& shape, DType dtype, int64_t offset = 0);
void fill_from(Tensor& t, const Gen& gen, int64_t offset = 0);
void fill_constant(Tensor& t, double value);
// A byte copy made by the test itself (not Tensor::clone), to check later that `t` is unchanged.
Tensor snapshot(const Tensor& t);
std::vector<double> to_doubles(const Tensor& t);

// Reduction over ranks 0..world-1 of Gen(pattern_for(op), dtype, k, salt), flat elements
// [offset, offset + n): computed in double, exact for the patterns above.
std::vector<double> reduce_reference(DType dtype, ReduceOp op, int world, int64_t offset,
                                     int64_t n, uint64_t salt);
// Relative tolerance for comparing a result of `op` in `dtype` (0: exact).
double rtol_for(DType dtype, ReduceOp op);
std::vector<ReduceOp> ops_for(DType dtype);  // Avg only for floating dtypes

Shape shape_of(int64_t rows, int64_t inner);  // inner == 0: 1-D [rows]; else [rows, inner]
inline int64_t row_numel(int64_t inner) { return inner == 0 ? 1 : inner; }
std::string shape_string(const Shape& s);

// Uneven row counts with zeros: one per rank.
std::vector<int64_t> uneven_sizes(int world, int64_t rows, uint64_t salt);
// Rows rank `src` sends to rank `dst` in the uneven all-to-all cases (zeros included).
int64_t a2a_rows(int world, int64_t rows, int src, int dst, uint64_t salt);
int64_t sum_of(const std::vector<int64_t>& v);

// "" when `got` has `dtype` and `shape` and every element matches (|got - exp| <= rtol * |exp|
// + atol); otherwise a description of the first mismatches.
std::string compare(const Tensor& got, DType dtype, const Shape& shape,
                    const std::vector<double>& expected, double rtol = 0.0, double atol = 0.0);

// ---------------------------------------------------------------------------------------------
// Results collected on rank threads.
class Ctx {
 public:
  explicit Ctx(int world) : world_(world) {}
  int world() const { return world_; }

  // Records one check; `message` is only evaluated on failure.
  void expect(bool ok, const std::function<std::string()>& message);
  void fail(const std::string& message) { expect(false, [&] { return message; }); }
  // Checks a tensor against a reference (see compare()).
  void expect_tensor(const std::string& where, const Tensor& got, DType dtype, const Shape& shape,
                     const std::vector<double>& expected, double rtol = 0.0);

  // Checks that `now` still holds the bytes `before` (a snapshot()) holds.
  void expect_unchanged(const std::string& where, const Tensor& now, const Tensor& before);

  // A value computed once for all rank threads (the first caller computes, the others wait).
  // `compute` must not communicate.
  const std::vector<double>& shared(const std::string& key,
                                    const std::function<std::vector<double>()>& compute);

  size_t checks() const;
  size_t failures() const;
  std::vector<std::string> messages() const;

 private:
  struct Memo {
    std::once_flag once;
    std::vector<double> value;
  };
  int world_;
  mutable std::mutex mu_;
  size_t checks_ = 0;
  size_t failures_ = 0;
  std::vector<std::string> messages_;
  std::map<std::string, std::shared_ptr<Memo>> memo_;
};

std::string located(const char* file, int line, const char* expr, const std::string& where);

// FT_CHECK(ctx, condition, where): a boolean check on a rank thread.
#define FT_CHECK(ctx, cond, where)                                                        \
  (ctx).expect(static_cast<bool>(cond),                                                   \
               [&] { return ::ftest::located(__FILE__, __LINE__, #cond, (where)); })

// Runs fn on `world` ranks (run_ranks) and reports, on the main thread, every failure recorded
// in the Ctx and any exception run_ranks rethrew; also requires that checks were made.
void run_checked(int world, const std::function<void(Group&, Ctx&)>& fn);

// "rank 2/4 float32 [37] sum" style prefix for messages.
std::string where(const Group& g, const std::string& what);

// The ferry error class of an exception, by name ("InvalidArgument", ...).
std::string error_kind(const std::exception& e);
std::string error_kind(const std::exception_ptr& e);

// Expects `call` to throw InvalidArgument from the call itself. If it returns a Work instead,
// that is a failure; the Work is then waited for briefly (errors ignored) so nothing hangs.
void expect_invalid(Ctx& ctx, const std::string& where, const std::function<Work()>& call);

// Calls fn, returns the exception it threw (or nullptr).
std::exception_ptr capture(const std::function<void()>& fn);
std::string what_of(const std::exception_ptr& e);

double seconds_since(std::chrono::steady_clock::time_point t0);
// steady_clock now, in seconds since its epoch (comparable between processes of one host).
double seconds_now();

// ---------------------------------------------------------------------------------------------
// Scoped process-wide settings; set them on the main thread, outside run_ranks.
class ScopedDefaultTimeout {
 public:
  explicit ScopedDefaultTimeout(std::chrono::milliseconds timeout)
      : previous_(ferry::default_timeout()) {
    ferry::set_default_timeout(timeout);
  }
  ~ScopedDefaultTimeout() { ferry::set_default_timeout(previous_); }
  ScopedDefaultTimeout(const ScopedDefaultTimeout&) = delete;
  ScopedDefaultTimeout& operator=(const ScopedDefaultTimeout&) = delete;

 private:
  std::chrono::milliseconds previous_;
};

// Counts a latch down when a rank's function ends, however it ends: a rank that stays alive
// waiting for the others (to keep a peer "skipped" but not dead) can never wait forever.
class CountDownOnExit {
 public:
  CountDownOnExit(std::latch& latch, bool active) : latch_(latch), active_(active) {}
  ~CountDownOnExit() {
    if (active_) latch_.count_down();
  }
  CountDownOnExit(const CountDownOnExit&) = delete;
  CountDownOnExit& operator=(const CountDownOnExit&) = delete;

 private:
  std::latch& latch_;
  bool active_;
};

class ScopedAlgorithm {
 public:
  explicit ScopedAlgorithm(const std::string& spec) { ferry::set_algorithm_override(spec); }
  ~ScopedAlgorithm() { ferry::set_algorithm_override(""); }
  ScopedAlgorithm(const ScopedAlgorithm&) = delete;
  ScopedAlgorithm& operator=(const ScopedAlgorithm&) = delete;
};

}  // namespace ftest
