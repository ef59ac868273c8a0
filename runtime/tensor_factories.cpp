// Factories that make new tensors: constants, ranges, seeded random values, vectors, cat.
#include <ferry/runtime/tensor.h>
#include <ferry/runtime/tensor_detail.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>
#include <type_traits>

namespace ferry {

Tensor empty(Shape shape, DType dtype) {
  const int64_t n = detail::checked_numel(shape, "empty");
  size_t nbytes = 0;
  FERRY_CHECK(!__builtin_mul_overflow(static_cast<size_t>(n), dtype_size(dtype), &nbytes),
              InvalidArgument, "empty: shape ", shape_str(shape), " of ", dtype_name(dtype),
              " needs more bytes than size_t can count");
  return Tensor(detail::Storage::allocate(nbytes), 0, std::move(shape), dtype);
}

Tensor empty_shared(Shape shape, DType dtype) {
  const int64_t n = detail::checked_numel(shape, "empty_shared");
  size_t nbytes = 0;
  FERRY_CHECK(!__builtin_mul_overflow(static_cast<size_t>(n), dtype_size(dtype), &nbytes),
              InvalidArgument, "empty_shared: shape ", shape_str(shape), " of ",
              dtype_name(dtype), " needs more bytes than size_t can count");
  return Tensor(detail::Storage::allocate_shared(nbytes), 0, std::move(shape), dtype);
}

Tensor zeros(Shape shape, DType dtype) {
  Tensor out = empty(std::move(shape), dtype);
  // All-zero bytes are +0 or 0 in every dtype.
  if (out.nbytes() > 0) std::memset(out.raw_data(), 0, out.nbytes());
  return out;
}

Tensor ones(Shape shape, DType dtype) { return full(std::move(shape), 1.0, dtype); }

Tensor full(Shape shape, double value, DType dtype) {
  Tensor out = empty(std::move(shape), dtype);
  // Not fill_: a fresh tensor starts at version 0.
  detail::fill_elements(out.raw_data(), dtype, out.numel(), value);
  return out;
}

Tensor arange(int64_t end, DType dtype) {
  FERRY_CHECK(end >= 0, InvalidArgument, "arange: end must be >= 0 but is ", end);
  Tensor out = empty({end}, dtype);
  void* p = out.raw_data();
  for (int64_t i = 0; i < end; ++i) detail::store_from_double(p, dtype, i, static_cast<double>(i));
  return out;
}

Tensor arange(double start, double end, double step, DType dtype) {
  FERRY_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), InvalidArgument,
              "arange: start, end and step must be finite but are ", start, ", ", end, ", ", step);
  FERRY_CHECK(step != 0, InvalidArgument, "arange: step must be non-zero");
  FERRY_CHECK((step > 0 && end >= start) || (step < 0 && end <= start), InvalidArgument,
              "arange: step ", step, " does not lead from ", start, " to ", end);
  const double count = std::ceil((end - start) / step);
  FERRY_CHECK(count < 9.0e18, InvalidArgument, "arange: ", count, " elements are too many");
  const auto n = static_cast<int64_t>(count);
  Tensor out = empty({n}, dtype);
  void* p = out.raw_data();
  // start + i * step rather than accumulating, so rounding error does not grow along the range.
  for (int64_t i = 0; i < n; ++i) {
    detail::store_from_double(p, dtype, i, start + static_cast<double>(i) * step);
  }
  return out;
}

namespace {

// A double in [0, 1) from the top 53 bits of one draw. std::uniform_real_distribution and
// std::normal_distribution are implementation-defined, so the mapping is done here to give the
// same values with every standard library.
double unit_double(std::mt19937_64& gen) {
  return static_cast<double>(gen() >> 11) * 0x1.0p-53;
}

// The largest value of T below `v`, for the float types (used to keep uniform's open bound).
template <class T>
T next_below(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::nextafter(v, -std::numeric_limits<T>::infinity());
  } else {
    // half and bfloat16: step the sign-magnitude bit pattern one unit toward -infinity.
    const uint16_t bits = std::bit_cast<uint16_t>(v);
    if (bits == 0x0000 || bits == 0x8000) return std::bit_cast<T>(uint16_t{0x8001});
    return std::bit_cast<T>(static_cast<uint16_t>((bits & 0x8000) ? bits + 1 : bits - 1));
  }
}

}  // namespace

Tensor uniform(Shape shape, double low, double high, uint64_t seed, DType dtype) {
  FERRY_CHECK(std::isfinite(low) && std::isfinite(high) && low <= high, InvalidArgument,
              "uniform: needs finite low <= high but got low ", low, " and high ", high);
  Tensor out = empty(std::move(shape), dtype);
  std::mt19937_64 gen(seed);
  const int64_t n = out.numel();
  visit_dtype(dtype, [&]<class T>() {
    T* p = static_cast<T*>(out.raw_data());
    for (int64_t i = 0; i < n; ++i) {
      const double v = low + (high - low) * unit_double(gen);
      detail::store_from_double(p, dtype, i, v);
      if constexpr (!std::is_integral_v<T>) {
        // Rounding to the element type can land on `high` itself; the interval is half-open.
        while (low < high && static_cast<double>(p[i]) >= high) p[i] = next_below(p[i]);
      }
    }
  });
  return out;
}

Tensor normal(Shape shape, double mean, double stddev, uint64_t seed, DType dtype) {
  FERRY_CHECK(std::isfinite(mean) && std::isfinite(stddev) && stddev >= 0, InvalidArgument,
              "normal: needs finite mean and finite stddev >= 0 but got mean ", mean,
              " and stddev ", stddev);
  Tensor out = empty(std::move(shape), dtype);
  std::mt19937_64 gen(seed);
  const int64_t n = out.numel();
  void* p = out.raw_data();
  // Box-Muller, using both values of each pair. u1 is in (0, 1] so log(u1) is finite. The results
  // are as portable as the libm's log, sqrt, cos and sin (glibc's are correctly rounded or
  // within an ulp on every architecture).
  for (int64_t i = 0; i < n; i += 2) {
    const double u1 = 1.0 - unit_double(gen);
    const double u2 = unit_double(gen);
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 2.0 * std::numbers::pi * u2;
    detail::store_from_double(p, dtype, i, mean + stddev * radius * std::cos(angle));
    if (i + 1 < n) detail::store_from_double(p, dtype, i + 1, mean + stddev * radius * std::sin(angle));
  }
  return out;
}

template <class T>
Tensor from_vector(const std::vector<T>& values, Shape shape) {
  Tensor out = empty(std::move(shape), dtype_of<T>);
  FERRY_CHECK(static_cast<size_t>(out.numel()) == values.size(), InvalidArgument,
              "from_vector: shape ", shape_str(out.shape()), " has ", out.numel(),
              " elements but the vector has ", values.size());
  if (!values.empty()) std::memcpy(out.raw_data(), values.data(), out.nbytes());
  return out;
}

template <class T>
Tensor from_vector(const std::vector<T>& values) {
  return from_vector(values, Shape{static_cast<int64_t>(values.size())});
}

#define FERRY_INSTANTIATE_FROM_VECTOR(T)                          \
  template Tensor from_vector<T>(const std::vector<T>&, Shape); \
  template Tensor from_vector<T>(const std::vector<T>&);

FERRY_INSTANTIATE_FROM_VECTOR(float)
FERRY_INSTANTIATE_FROM_VECTOR(double)
FERRY_INSTANTIATE_FROM_VECTOR(half)
FERRY_INSTANTIATE_FROM_VECTOR(bfloat16)
FERRY_INSTANTIATE_FROM_VECTOR(int32_t)
FERRY_INSTANTIATE_FROM_VECTOR(int64_t)
FERRY_INSTANTIATE_FROM_VECTOR(uint8_t)
#undef FERRY_INSTANTIATE_FROM_VECTOR

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  FERRY_CHECK(!tensors.empty(), InvalidArgument, "cat: needs at least one tensor but got none");
  for (size_t i = 0; i < tensors.size(); ++i) {
    FERRY_CHECK(tensors[i].defined(), InvalidArgument, "cat: tensor ", i, " is undefined");
  }
  const Tensor& first = tensors.front();
  const int64_t rank = first.dim();
  FERRY_CHECK(rank >= 1, InvalidArgument, "cat: 0-d tensors cannot be concatenated");
  FERRY_CHECK(dim >= -rank && dim < rank, InvalidArgument, "cat: dim ", dim,
              " is out of range for tensors of rank ", rank);
  if (dim < 0) dim += rank;
  const auto d = static_cast<size_t>(dim);

  Shape out_shape = first.shape();
  out_shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    FERRY_CHECK(t.dtype() == first.dtype(), InvalidArgument, "cat: tensor ", i, " has dtype ",
                dtype_name(t.dtype()), " but tensor 0 has ", dtype_name(first.dtype()));
    bool same = t.dim() == rank;
    for (size_t k = 0; same && k < out_shape.size(); ++k) {
      same = k == d || t.shape()[k] == first.shape()[k];
    }
    FERRY_CHECK(same, InvalidArgument, "cat: tensor ", i, " has shape ", shape_str(t.shape()),
                " but along dim ", dim, " it must match tensor 0's shape ",
                shape_str(first.shape()), " in every other dim");
    out_shape[d] += t.shape()[d];
  }

  Tensor out = empty(out_shape, first.dtype());
  if (out.numel() == 0) return out;
  int64_t outer = 1;
  for (size_t k = 0; k < d; ++k) outer *= out_shape[k];
  int64_t inner = 1;
  for (size_t k = d + 1; k < out_shape.size(); ++k) inner *= out_shape[k];
  const size_t inner_bytes = static_cast<size_t>(inner) * out.element_size();
  const size_t out_row = static_cast<size_t>(out_shape[d]) * inner_bytes;

  // Each input contributes one contiguous block per outer index; walk inputs in order so the
  // output is written front to back.
  auto* dst = static_cast<std::byte*>(out.raw_data());
  for (int64_t o = 0; o < outer; ++o) {
    size_t at = static_cast<size_t>(o) * out_row;
    for (const Tensor& t : tensors) {
      const size_t block = static_cast<size_t>(t.shape()[d]) * inner_bytes;
      if (block == 0) continue;
      const auto* src = static_cast<const std::byte*>(t.raw_data());
      std::memcpy(dst + at, src + static_cast<size_t>(o) * block, block);
      at += block;
    }
  }
  return out;
}

}  // namespace ferry
