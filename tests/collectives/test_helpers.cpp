#include "test_helpers.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <sstream>
#include <typeinfo>

namespace ftest {

namespace {

template <class T>
constexpr bool kIsHalf = std::is_same_v<T, ferry::half> || std::is_same_v<T, ferry::bfloat16>;

template <class T>
T from_double(double v) {
  if constexpr (kIsHalf<T>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

template <class T>
double as_double(T v) {
  if constexpr (kIsHalf<T>) {
    return static_cast<double>(static_cast<float>(v));
  } else {
    return static_cast<double>(v);
  }
}

}  // namespace

Pattern pattern_for(ReduceOp op) { return op == ReduceOp::Prod ? Pattern::Prod : Pattern::Small; }

Gen::Gen(Pattern pattern, DType dtype, int rank, uint64_t salt)
    : pattern_(pattern), dtype_(dtype), rank_(rank), salt_(salt),
      seed_(mix64(static_cast<uint64_t>(rank) * 0x9E3779B97F4A7C15ull ^
                  mix64(salt * 0xC2B2AE3D27D4EB4Full + static_cast<uint64_t>(pattern)))) {
  if (pattern == Pattern::Small) {  // [-5, 5], or [0, 10] for uint8
    range_ = 11;
    offset_ = dtype == DType::UInt8 ? 0.0 : -5.0;
    return;
  }
  switch (dtype) {  // Pattern::Move: the widest range that stays exact in the dtype
    case DType::UInt8: range_ = 256; offset_ = 0.0; break;
    case DType::BFloat16: range_ = 255; offset_ = -127.0; break;
    case DType::Float16: range_ = 2047; offset_ = -1023.0; break;
    default: range_ = 200001; offset_ = -100000.0; break;
  }
}

double Gen::prod_value(int64_t i) const {
  // Per index, exactly two of any 8 consecutive ranks get the factor 2 and at most two the
  // extra 1: |product over <= 8 ranks| <= 16.
  const int64_t s = static_cast<int64_t>(salt_ % 1000);
  double v = 1.0 + ((rank_ + i + s) % 4 == 0 ? 1.0 : 0.0) + ((rank_ + 2 * i + s) % 7 == 3 ? 1.0 : 0.0);
  if (dtype_ != DType::UInt8 && (3 * rank_ + i + s) % 5 == 0) v = -v;
  return v;
}

std::vector<double> gen_values(const Gen& gen, int64_t offset, int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = gen(offset + i);
  return v;
}

void fill_from(Tensor& t, const Gen& gen, int64_t offset) {
  const int64_t n = t.numel();
  if (n == 0) return;
  ferry::visit_dtype(t.dtype(), [&]<class T>() {
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = from_double<T>(gen(offset + i));
  });
}

void fill_constant(Tensor& t, double value) {
  const int64_t n = t.numel();
  if (n == 0) return;
  ferry::visit_dtype(t.dtype(), [&]<class T>() {
    T* p = t.data<T>();
    const T v = from_double<T>(value);
    for (int64_t i = 0; i < n; ++i) p[i] = v;
  });
}

Tensor snapshot(const Tensor& t) {
  Tensor copy = ferry::empty(t.shape(), t.dtype());
  if (t.nbytes() > 0) std::memcpy(copy.raw_data(), t.raw_data(), t.nbytes());
  return copy;
}

Tensor make_tensor(const Gen& gen, const Shape& shape, DType dtype, int64_t offset) {
  Tensor t = ferry::empty(shape, dtype);
  fill_from(t, gen, offset);
  return t;
}

std::vector<double> to_doubles(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  if (out.empty()) return out;
  ferry::visit_dtype(t.dtype(), [&]<class T>() {
    const T* p = t.data<T>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = as_double(p[i]);
  });
  return out;
}

std::vector<double> reduce_reference(DType dtype, ReduceOp op, int world, int64_t offset,
                                     int64_t n, uint64_t salt) {
  std::vector<double> acc = gen_values(Gen(pattern_for(op), dtype, 0, salt), offset, n);
  for (int k = 1; k < world; ++k) {
    const Gen g(pattern_for(op), dtype, k, salt);
    for (int64_t i = 0; i < n; ++i) {
      double& a = acc[static_cast<size_t>(i)];
      const double v = g(offset + i);
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Avg: a += v; break;
        case ReduceOp::Prod: a *= v; break;
        case ReduceOp::Min: a = std::min(a, v); break;
        case ReduceOp::Max: a = std::max(a, v); break;
      }
    }
  }
  if (op == ReduceOp::Avg)
    for (double& a : acc) a /= world;
  return acc;
}

double rtol_for(DType dtype, ReduceOp op) {
  if (op != ReduceOp::Avg) return 0.0;
  switch (dtype) {  // two units in the last place of the dtype: one rounding of a float32 mean
    case DType::Float32: return 1e-6;
    case DType::Float64: return 1e-12;
    case DType::Float16: return 1.0 / 512;
    case DType::BFloat16: return 1.0 / 128;
    default: return 0.0;
  }
}

std::vector<ReduceOp> ops_for(DType dtype) {
  const bool floating = dtype == DType::Float32 || dtype == DType::Float64 ||
                        dtype == DType::Float16 || dtype == DType::BFloat16;
  std::vector<ReduceOp> ops{ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max};
  if (floating) ops.push_back(ReduceOp::Avg);
  return ops;
}

Shape shape_of(int64_t rows, int64_t inner) {
  return inner == 0 ? Shape{rows} : Shape{rows, inner};
}

std::string shape_string(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

std::vector<int64_t> uneven_sizes(int world, int64_t rows, uint64_t salt) {
  std::vector<int64_t> sizes(static_cast<size_t>(world), 0);
  if (rows == 0) return sizes;
  for (int k = 0; k < world; ++k) {
    const uint64_t u = static_cast<uint64_t>(k) + salt;
    sizes[static_cast<size_t>(k)] =
        u % 3 == 1 ? 0 : rows + static_cast<int64_t>((7 * static_cast<uint64_t>(k) + salt) % 5);
  }
  return sizes;
}

int64_t a2a_rows(int world, int64_t rows, int src, int dst, uint64_t salt) {
  if (rows == 0) return 0;
  const uint64_t s = static_cast<uint64_t>(src), d = static_cast<uint64_t>(dst);
  if ((s + 2 * d + salt) % 3 == 0) return 0;
  return rows + static_cast<int64_t>((s * static_cast<uint64_t>(world) + d + salt) % 5);
}

int64_t sum_of(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

std::string compare(const Tensor& got, DType dtype, const Shape& shape,
                    const std::vector<double>& expected, double rtol, double atol) {
  std::ostringstream os;
  if (!got.defined()) return "result tensor is undefined";
  if (got.dtype() != dtype) {
    os << "dtype " << ferry::dtype_name(got.dtype()) << ", expected " << ferry::dtype_name(dtype);
    return os.str();
  }
  if (got.shape() != shape) {
    os << "shape " << shape_string(got.shape()) << ", expected " << shape_string(shape);
    return os.str();
  }
  const std::vector<double> values = to_doubles(got);
  if (values.size() != expected.size()) {
    os << "numel " << values.size() << ", reference has " << expected.size();
    return os.str();
  }
  size_t bad = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const double e = expected[i], g = values[i];
    const bool ok = rtol == 0.0 && atol == 0.0 ? g == e : std::fabs(g - e) <= atol + rtol * std::fabs(e);
    if (ok) continue;
    if (bad < 5) os << (bad ? "; " : "") << "[" << i << "] got " << g << " expected " << e;
    ++bad;
  }
  if (bad == 0) return "";
  os << " (" << bad << " of " << values.size() << " elements differ)";
  return os.str();
}

// ---------------------------------------------------------------------------------------------

void Ctx::expect(bool ok, const std::function<std::string()>& message) {
  std::string text;
  if (!ok) text = message();
  std::lock_guard<std::mutex> lock(mu_);
  ++checks_;
  if (ok) return;
  ++failures_;
  if (messages_.size() < 40) messages_.push_back(std::move(text));
}

void Ctx::expect_tensor(const std::string& where, const Tensor& got, DType dtype,
                        const Shape& shape, const std::vector<double>& expected, double rtol) {
  const std::string diff = compare(got, dtype, shape, expected, rtol, rtol > 0 ? 1e-6 : 0.0);
  expect(diff.empty(), [&] { return where + ": " + diff; });
}

void Ctx::expect_unchanged(const std::string& where, const Tensor& now, const Tensor& before) {
  bool same = now.defined() && now.dtype() == before.dtype() && now.shape() == before.shape();
  size_t first = 0;
  if (same && before.nbytes() > 0) {
    const auto* a = static_cast<const unsigned char*>(now.raw_data());
    const auto* b = static_cast<const unsigned char*>(before.raw_data());
    same = std::memcmp(a, b, before.nbytes()) == 0;
    while (!same && first < before.nbytes() && a[first] == b[first]) ++first;
  }
  expect(same, [&] {
    return where + ": modified (first differing byte " + std::to_string(first) + " of " +
           std::to_string(before.nbytes()) + ")";
  });
}

const std::vector<double>& Ctx::shared(const std::string& key,
                                       const std::function<std::vector<double>()>& compute) {
  std::shared_ptr<Memo> memo;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = memo_[key];
    if (!slot) slot = std::make_shared<Memo>();
    memo = slot;
  }
  std::call_once(memo->once, [&] { memo->value = compute(); });
  return memo->value;  // the map keeps the Memo alive for the Ctx's lifetime
}

size_t Ctx::checks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return checks_;
}

size_t Ctx::failures() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failures_;
}

std::vector<std::string> Ctx::messages() const {
  std::lock_guard<std::mutex> lock(mu_);
  return messages_;
}

std::string located(const char* file, int line, const char* expr, const std::string& where) {
  std::ostringstream os;
  os << where << ": check failed: " << expr << " [" << file << ":" << line << "]";
  return os.str();
}

void run_checked(int world, const std::function<void(Group&, Ctx&)>& fn) {
  Ctx ctx(world);
  std::string thrown;
  try {
    ferry::run_ranks(world, [&](Group& g) { fn(g, ctx); });
  } catch (const std::exception& e) {
    thrown = error_kind(e) + ": " + e.what();
  } catch (...) {
    thrown = "an exception not derived from std::exception";
  }
  INFO("world size " << world << ", " << ctx.checks() << " checks made on rank threads");
  const std::vector<std::string> messages = ctx.messages();
  for (const std::string& m : messages) FAIL_CHECK(m);
  if (ctx.failures() > messages.size())
    FAIL_CHECK((ctx.failures() - messages.size()) << " more failures not shown");
  if (!thrown.empty()) FAIL_CHECK("run_ranks threw " << thrown);
  CHECK(ctx.failures() == 0);
  CHECK(ctx.checks() > 0);
}

std::string where(const Group& g, const std::string& what) {
  return "rank " + std::to_string(g.rank()) + "/" + std::to_string(g.size()) + " " + what;
}

std::string error_kind(const std::exception& e) {
  if (dynamic_cast<const ferry::InvalidArgument*>(&e)) return "InvalidArgument";
  if (dynamic_cast<const ferry::MismatchError*>(&e)) return "MismatchError";
  if (dynamic_cast<const ferry::TimeoutError*>(&e)) return "TimeoutError";
  if (dynamic_cast<const ferry::PeerFailure*>(&e)) return "PeerFailure";
  if (dynamic_cast<const ferry::TransportError*>(&e)) return "TransportError";
  if (dynamic_cast<const ferry::Error*>(&e)) return "ferry::Error";
  return std::string("non-ferry exception ") + typeid(e).name();
}

std::string error_kind(const std::exception_ptr& e) {
  if (!e) return "no exception";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return error_kind(x);
  } catch (...) {
    return "unknown exception";
  }
}

std::string what_of(const std::exception_ptr& e) {
  if (!e) return "";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

std::exception_ptr capture(const std::function<void()>& fn) {
  try {
    fn();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

void expect_invalid(Ctx& ctx, const std::string& where, const std::function<Work()>& call) {
  Work work;
  try {
    work = call();
  } catch (const ferry::InvalidArgument& e) {
    ctx.expect(e.what()[0] != '\0', [&] { return where + ": InvalidArgument without a message"; });
    return;
  } catch (const std::exception& e) {
    ctx.fail(where + ": expected InvalidArgument from the call, got " + error_kind(e) + ": " +
             e.what());
    return;
  }
  ctx.fail(where + ": expected InvalidArgument from the call, but it returned a Work");
  try {
    work.wait(std::chrono::milliseconds(2000));
  } catch (...) {
    // already reported: the call should never have started
  }
}

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace ftest
