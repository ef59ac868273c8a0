// Element conversion between dtypes: Tensor::to, copy_, fill_, set_flat and the factories all
// come through here, so every path rounds and saturates the same way.
#include <ferry/runtime/tensor.h>
#include <ferry/runtime/tensor_detail.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

namespace ferry::detail {

// Narrowing double->float relies on IEEE overflow to infinity instead of the undefined
// behaviour the C++ standard allows for out-of-range values.
static_assert(std::numeric_limits<float>::is_iec559 && std::numeric_limits<double>::is_iec559);

float double_to_float_odd(double value) {
  float f = static_cast<float>(value);  // round to nearest even
  if (std::isnan(value) || static_cast<double>(f) == value) return f;
  // Inexact: step back to the float truncated toward zero, then make its last bit odd. Of the two
  // floats bracketing `value` exactly one is odd, and it is the truncated one or its successor
  // in magnitude, whose bit pattern is the truncated one's plus one.
  if (std::fabs(static_cast<double>(f)) > std::fabs(value)) f = std::nextafter(f, 0.0f);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
}

float int64_to_float_odd(int64_t value) {
  // Negating in unsigned arithmetic keeps INT64_MIN well defined.
  const uint64_t magnitude = value < 0 ? 0 - static_cast<uint64_t>(value)
                                       : static_cast<uint64_t>(value);
  constexpr int kBits = std::numeric_limits<float>::digits;  // 24
  const int width = std::bit_width(magnitude);
  float f;
  if (width <= kBits) {
    f = static_cast<float>(magnitude);  // exact
  } else {
    // Going through double would round once already for |value| > 2^53; keep a sticky bit
    // instead so the result is the round-to-odd float of the exact integer.
    const int shift = width - kBits;
    uint64_t kept = magnitude >> shift;
    if ((magnitude & ((uint64_t{1} << shift) - 1)) != 0) kept |= 1;
    f = std::ldexp(static_cast<float>(kept), shift);  // kept < 2^24 and shift <= 40: exact
  }
  return value < 0 ? -f : f;
}

half double_to_half(double value) { return half(double_to_float_odd(value)); }
bfloat16 double_to_bfloat16(double value) { return bfloat16(double_to_float_odd(value)); }
bfloat16 int64_to_bfloat16(int64_t value) { return bfloat16(int64_to_float_odd(value)); }

namespace {

template <class T>
inline constexpr bool kIsReduced = std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

// A value that is not NaN, truncated toward zero and clamped to To's range.
template <class To>
To saturate_from_double(double d) {
  if (std::isnan(d)) return To(0);
  const double t = std::trunc(d);
  using Lim = std::numeric_limits<To>;
  // Both bounds are exact doubles (a power of two, or 0): max() + 1 is 2^k for every integer To,
  // and for int64 the double nearest max() already is 2^63.
  constexpr double kLow = static_cast<double>(Lim::min());
  constexpr double kHighExclusive = static_cast<double>(Lim::max()) + 1.0;
  if (t < kLow) return Lim::min();
  if (t >= kHighExclusive) return Lim::max();
  return static_cast<To>(t);
}

template <class To, class From>
To convert_value(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_integral_v<To>) {
    if constexpr (std::is_integral_v<From>) {
      using Lim = std::numeric_limits<To>;
      if (std::cmp_less(v, Lim::min())) return Lim::min();
      if (std::cmp_greater(v, Lim::max())) return Lim::max();
      return static_cast<To>(v);
    } else {
      return saturate_from_double<To>(static_cast<double>(v));  // widening is exact
    }
  } else if constexpr (std::is_floating_point_v<To>) {
    // One rounding at most: half/bfloat16 widen exactly, everything else is a single RNE cast.
    if constexpr (kIsReduced<From>) {
      return static_cast<To>(static_cast<float>(v));
    } else {
      return static_cast<To>(v);
    }
  } else {
    // To is half or bfloat16. Eigen rounds float to nearest even; sources wider than float get
    // there by round-to-odd so the two roundings compose into one.
    if constexpr (std::is_same_v<From, double> || std::is_same_v<From, int32_t>) {
      return To(double_to_float_odd(static_cast<double>(v)));
    } else if constexpr (std::is_same_v<From, int64_t>) {
      return To(int64_to_float_odd(v));
    } else {
      return To(static_cast<float>(v));  // float, uint8 and the other 16-bit type are exact
    }
  }
}

// Whole buffers between float and the 16-bit floats, which every 16-bit reduction runs twice
// (widened on the way in, rounded on the way out): the element loop below went through Eigen's
// scalar conversions at 0.2-1 ns an element, 2-8x a copy of the same bytes. These loops give
// the same bits as that loop and vectorise. bfloat16 is Eigen's rounding written out (to
// nearest even; a NaN becomes the quiet NaN 0x7FC0 of its sign). half takes F16C's 8-wide
// instructions where the build targets them: they round to nearest even as Eigen does, but
// treat NaNs otherwise (they set the quiet bit and keep payloads that Eigen does not), so any
// 8 elements holding a NaN are converted again by Eigen's scalar code. False when the pair is
// not one of these.
bool convert_16bit_floats(const void* src, DType from, void* dst, DType to, int64_t n) {
  if (from == DType::BFloat16 && to == DType::Float32) {
    const auto* in = static_cast<const uint16_t*>(src);
    auto* out = static_cast<uint32_t*>(dst);  // float bits: bfloat16 is a float's top half
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<uint32_t>(in[i]) << 16;
    return true;
  }
  if (from == DType::Float32 && to == DType::BFloat16) {
    const auto* in = static_cast<const uint32_t*>(src);
    auto* out = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t x = in[i];
      const uint32_t rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
      const uint32_t quiet_nan = ((x >> 16) & 0x8000u) | 0x7FC0u;
      out[i] = static_cast<uint16_t>((x & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
    }
    return true;
  }
#if defined(__F16C__) && defined(__AVX__)
  if (from == DType::Float16 && to == DType::Float32) {
    const auto* in = static_cast<const uint16_t*>(src);
    auto* out = static_cast<float*>(dst);
    int64_t i = 0;
    const __m128i magnitude = _mm_set1_epi16(0x7FFF), infinity = _mm_set1_epi16(0x7C00);
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
      if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(h, magnitude), infinity)) != 0)
        for (int64_t k = i; k < i + 8; ++k) out[k] = static_cast<float>(std::bit_cast<half>(in[k]));
    }
    for (; i < n; ++i) out[i] = static_cast<float>(std::bit_cast<half>(in[i]));
    return true;
  }
  if (from == DType::Float32 && to == DType::Float16) {
    const auto* in = static_cast<const float*>(src);
    auto* out = static_cast<uint16_t*>(dst);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 x = _mm256_loadu_ps(in + i);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                       _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
      if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0)
        for (int64_t k = i; k < i + 8; ++k) out[k] = std::bit_cast<uint16_t>(half(in[k]));
    }
    for (; i < n; ++i) out[i] = std::bit_cast<uint16_t>(half(in[i]));
    return true;
  }
#endif
  return false;
}

}  // namespace

void convert_elements(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n) {
  if (n <= 0) return;
  if (src_dtype == dst_dtype) {
    std::memmove(dst, src, static_cast<size_t>(n) * dtype_size(src_dtype));
    return;
  }
  if (convert_16bit_floats(src, src_dtype, dst, dst_dtype, n)) return;
  visit_dtype(src_dtype, [&]<class From>() {
    visit_dtype(dst_dtype, [&]<class To>() {
      const From* in = static_cast<const From*>(src);
      To* out = static_cast<To*>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = convert_value<To>(in[i]);
    });
  });
}

void fill_elements(void* dst, DType dtype, int64_t n, double value) {
  if (n <= 0) return;
  visit_dtype(dtype, [&]<class T>() {
    std::fill_n(static_cast<T*>(dst), n, convert_value<T>(value));
  });
}

double load_as_double(const void* base, DType dtype, int64_t i) {
  return visit_dtype(dtype, [&]<class T>() {
    return convert_value<double>(static_cast<const T*>(base)[i]);
  });
}

void store_from_double(void* base, DType dtype, int64_t i, double value) {
  visit_dtype(dtype, [&]<class T>() { static_cast<T*>(base)[i] = convert_value<T>(value); });
}

}  // namespace ferry::detail

namespace ferry {

Tensor Tensor::to(DType dtype) const {
  check_defined("Tensor::to");
  Tensor out = empty(shape_, dtype);
  detail::convert_elements(raw_data(), dtype_, out.raw_data(), dtype, numel());
  return out;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_defined("Tensor::copy_");
  FERRY_CHECK(src.defined(), InvalidArgument, "Tensor::copy_: source tensor is undefined");
  FERRY_CHECK(src.numel() == numel(), InvalidArgument, "Tensor::copy_: source has ",
              src.numel(), " elements ", shape_str(src.shape()), " but destination has ", numel(),
              " ", shape_str(shape_));
  if (src.dtype() != dtype_ && overlaps(src)) {
    // Elements of different widths would overwrite source bytes not yet read.
    const Tensor staged = src.clone();
    detail::convert_elements(staged.raw_data(), staged.dtype(), raw_data(), dtype_, numel());
  } else {
    detail::convert_elements(src.raw_data(), src.dtype(), raw_data(), dtype_, numel());
  }
  bump_version();
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_defined("Tensor::fill_");
  detail::fill_elements(raw_data(), dtype_, numel(), value);
  bump_version();
  return *this;
}

}  // namespace ferry
