#include <ferry/collectives/torchrec/comm/codec_kernels.h>
#include <ferry/collectives/torchrec/utils/isa_clones.h>

#include <algorithm>
#include <bit>
#include <cstring>

// Contraction would fuse a product into the following add (FMA in the -v3 / -v4 variants) and
// round once where the scalar definition rounds twice: the variants would then disagree with
// each other and with fbgemm's CPU kernels. Keep every operation separately rounded.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

// One clone per ISA level (isa_clones.h); the helpers are inlined into every clone, so that each
// compiles them for its own ISA.
#define FERRY_CODEC_KERNEL FERRY_ISA_CLONES
#define FERRY_CODEC_INLINE FERRY_ISA_INLINE

namespace ferry::torchrec::detail {
namespace {

using u32 = uint32_t;
using i32 = int32_t;

inline u32 bits_of(float f) { return std::bit_cast<u32>(f); }
inline float float_of(u32 u) { return std::bit_cast<float>(u); }
// mask ? a : b with mask all ones or all zeros: the form the vectoriser keeps branch-free.
inline u32 select(u32 mask, u32 a, u32 b) { return (a & mask) | (b & ~mask); }
inline u32 mask_of(bool c) { return 0u - static_cast<u32>(c); }

constexpr i32 kInfBits = 0x7F800000;

// ---- IEEE binary16 ----

// Round-to-nearest-even of a float magnitude (bit pattern `a`, not NaN) to half, overflowing
// to inf. Normal halves: drop 13 mantissa bits with a nearest-even bias, rebias the exponent
// (the carry of a round-up moves into it). Subnormal halves: adding 0.5f lines the value up
// with the float ulp of [0.5, 1), 2^-24, which is the half subnormal step.
inline u32 half_magnitude(i32 a) {
  const u32 ua = static_cast<u32>(a);
  const u32 normal = (ua - (112u << 23) + 0xFFFu + ((ua >> 13) & 1u)) >> 13;
  const u32 subnormal = bits_of(float_of(ua) + 0.5f) - 0x3F000000u;
  u32 h = select(mask_of(a < 0x38800000), subnormal, normal);  // below 2^-14
  return select(mask_of(a >= 0x477FF000), 0x7C00u, h);         // rounds to 65536 or more
}

inline uint16_t float_to_half(float x) {
  const u32 u = bits_of(x);
  const i32 a = static_cast<i32>(u & 0x7FFFFFFFu);
  const u32 h = select(mask_of(a > kInfBits), 0x7E00u, half_magnitude(a));
  return static_cast<uint16_t>(h | ((u >> 16) & 0x8000u));
}

// clamp(x, -65504, 65504) then half, as torch.clamp(...).half(): NaN stays NaN. Clamping the
// magnitude's bit pattern instead of the float keeps the loop free of float selects, which
// GCC would turn into branches here.
inline uint16_t float_to_half_clamped(float x) {
  const u32 u = bits_of(x);
  i32 a = static_cast<i32>(u & 0x7FFFFFFFu);
  const u32 nan = mask_of(a > kInfBits);
  a = static_cast<i32>(select(mask_of(a > 0x477FE000), 0x477FE000u, static_cast<u32>(a)));
  const u32 h = select(nan, 0x7E00u, half_magnitude(a));
  return static_cast<uint16_t>(h | ((u >> 16) & 0x8000u));
}

inline float half_to_float(uint16_t h16) {
  const u32 h = h16;
  const u32 exponent = h & 0x7C00u;
  const u32 mantissa = h & 0x03FFu;
  const u32 normal = ((h & 0x7FFFu) << 13) + (112u << 23);
  const u32 special = 0x7F800000u | (mantissa << 13);  // inf, NaN (payload kept)
  const u32 subnormal = bits_of(static_cast<float>(static_cast<i32>(mantissa)) * 0x1p-24f);
  u32 f = select(mask_of(exponent == 0x7C00u), special, normal);
  f = select(mask_of(exponent == 0), subnormal, f);
  return float_of(f | ((h & 0x8000u) << 16));
}

// ---- bfloat16 ----

// Round to nearest even; NaN -> 0x7FC0 (c10::BFloat16's rule); overflow rounds to inf.
inline uint16_t float_to_bf16(float x) {
  const u32 u = bits_of(x);
  const u32 rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const i32 a = static_cast<i32>(u & 0x7FFFFFFFu);
  return static_cast<uint16_t>(select(mask_of(a > kInfBits), 0x7FC0u, rounded));
}

inline uint16_t float_to_bf16_clamped(float x) {
  const u32 u = bits_of(x);
  const i32 a = static_cast<i32>(u & 0x7FFFFFFFu);
  const u32 nan = mask_of(a > kInfBits);
  const u32 clamped = select(mask_of(a > 0x7F7F0000), 0x7F7F0000u | (u & 0x80000000u), u);
  const u32 rounded = (clamped + 0x7FFFu + ((clamped >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>(select(nan, 0x7FC0u, rounded));
}

inline float bf16_to_float(uint16_t b) { return float_of(static_cast<u32>(b) << 16); }

// ---- fbgemm HFP8 ----

template <Fp8Layout L>
struct Hfp8Params;
template <>
struct Hfp8Params<Fp8Layout::E4M3> {
  static constexpr int kEbits = 4, kBias = 15;
  static constexpr float kMax = kHfp8MaxE4M3;
};
template <>
struct Hfp8Params<Fp8Layout::E5M2> {
  static constexpr int kEbits = 5, kBias = 31;
  static constexpr float kMax = kHfp8MaxE5M2;
};

// fbgemm's float_to_hfp8 (quantize_ops_utils.h) without its branches: the magnitude is
// clamped to max_pos, normal values are rounded to mbits mantissa bits by adding and removing
// a "bouncer" 2^(23-mbits) times larger, subnormal ones by adding a bouncer whose ulp is the
// smallest subnormal step (the low byte of the sum is then the code). Differences: NaN is
// 0x7F (fbgemm's fminf turns it into max_pos), and with kKeepInf +-inf are 0x7E/0xFE.
template <Fp8Layout L, bool kKeepInf>
inline uint8_t float_to_hfp8(float x) {
  using P = Hfp8Params<L>;
  constexpr int kMbits = 7 - P::kEbits;
  constexpr i32 kMaxBits = static_cast<i32>(std::bit_cast<u32>(P::kMax));
  constexpr i32 kSmallestNormal = (127 - P::kBias + 1) << 23;
  constexpr u32 kSubnormalBouncer = static_cast<u32>(127 + 23 + 1 - P::kBias - kMbits) << 23;

  const u32 u = bits_of(x);
  const u32 sign = (u >> 24) & 0x80u;
  i32 a = static_cast<i32>(u & 0x7FFFFFFFu);
  const u32 nan = mask_of(a > kInfBits);
  const u32 inf = mask_of(a == kInfBits);
  // Non-negative floats order like their bit patterns.
  a = static_cast<i32>(select(mask_of(a > kMaxBits), kMaxBits, static_cast<u32>(a)));
  const float m = float_of(static_cast<u32>(a));

  const float bouncer = float_of((static_cast<u32>(a) & 0xFF800000u) + ((23u - kMbits) << 23));
  const u32 rounded = bits_of((bouncer + m) - bouncer);
  const u32 rebiased = rounded - (static_cast<u32>(127 - P::kBias) << 23);
  const u32 normal = (rebiased << (8 - P::kEbits)) >> 24;
  const u32 subnormal = bits_of(float_of(kSubnormalBouncer) + m) & 0xFFu;

  u32 code = select(mask_of(a < kSmallestNormal), subnormal, normal) | sign;
  if constexpr (kKeepInf) code = select(inf, kHfp8PosInf | sign, code);
  code = select(nan, kHfp8NaN, code);
  return static_cast<uint8_t>(code);
}

// fbgemm's hfp8_to_float, computed without subnormal float intermediates (fbgemm scales a
// subnormal float by 2^(127-bias)); plus the codes ferry reserves: 0x7F/0xFF NaN, 0x7E/0xFE
// +-inf. Neither layout's encoder produces them for a finite value (the largest codes are 0x77
// and 0x7B).
template <Fp8Layout L>
inline float hfp8_to_float(uint8_t q) {
  using P = Hfp8Params<L>;
  constexpr int kMbits = 7 - P::kEbits;
  constexpr float kSubnormalStep = 1.0f / static_cast<float>(1ull << (P::kBias - 1 + kMbits));
  const u32 magnitude = q & 0x7Fu;
  const u32 sign = static_cast<u32>(q & 0x80u) << 24;
  const u32 normal = (magnitude << (23 - kMbits)) + (static_cast<u32>(127 - P::kBias) << 23);
  const u32 subnormal =
      bits_of(static_cast<float>(static_cast<i32>(magnitude)) * kSubnormalStep);
  u32 f = select(mask_of((magnitude >> kMbits) == 0), subnormal, normal);
  f = select(mask_of(magnitude == kHfp8PosInf), 0x7F800000u, f);
  f = select(mask_of(magnitude == kHfp8NaN), 0x7FC00000u, f);
  return float_of(f | sign);
}

// ---- row statistics ----

// Lanes wide enough for one AVX-512 register of floats: the fixed-size inner loops below are
// what the vectoriser turns into vector min / max.
constexpr int64_t kLanes = 16;

struct RowRange {
  float min, max;
  bool finite;  // no NaN and no inf in the row
};

FERRY_CODEC_INLINE RowRange row_range(const float* x, int64_t n) {
  float mn[kLanes], mx[kLanes];
  u32 bad[kLanes];
  for (int64_t k = 0; k < kLanes; ++k) {
    mn[k] = float_of(0x7F800000u);
    mx[k] = -float_of(0x7F800000u);
    bad[k] = 0;
  }
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) {
      const float v = x[j + k];
      mn[k] = std::min(mn[k], v);
      mx[k] = std::max(mx[k], v);
      bad[k] |= mask_of(static_cast<i32>(bits_of(v) & 0x7FFFFFFFu) >= kInfBits);
    }
  }
  for (int64_t k = 0; j + k < n; ++k) {
    const float v = x[j + k];
    mn[k] = std::min(mn[k], v);
    mx[k] = std::max(mx[k], v);
    bad[k] |= mask_of(static_cast<i32>(bits_of(v) & 0x7FFFFFFFu) >= kInfBits);
  }
  RowRange r{mn[0], mx[0], bad[0] == 0};
  for (int64_t k = 1; k < kLanes; ++k) {
    r.min = std::min(r.min, mn[k]);
    r.max = std::max(r.max, mx[k]);
    r.finite = r.finite && bad[k] == 0;
  }
  return r;
}

// max |x| over the finite values of the row (0 when there are none), through the bit patterns:
// non-negative floats order like unsigned integers, and NaN / inf patterns are masked out.
FERRY_CODEC_INLINE float row_max_abs_finite(const float* x, int64_t n) {
  i32 mx[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) {
      const i32 a = static_cast<i32>(bits_of(x[j + k]) & 0x7FFFFFFFu);
      mx[k] = std::max(mx[k], a < kInfBits ? a : 0);
    }
  }
  for (int64_t k = 0; j + k < n; ++k) {
    const i32 a = static_cast<i32>(bits_of(x[j + k]) & 0x7FFFFFFFu);
    mx[k] = std::max(mx[k], a < kInfBits ? a : 0);
  }
  return float_of(static_cast<u32>(*std::max_element(mx, mx + kLanes)));
}

inline void store_float(uint8_t* p, float v) { std::memcpy(p, &v, sizeof v); }
inline float load_float(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

constexpr float kRowEpsilon = 1e-20f;  // fbgemm's GPU kernels (its CPU int8 kernel uses 1e-8)
constexpr float kRoundingBias = 12582912.0f;  // 1.5 * 2^23: x + this rounds x to an integer

// The padding between the codes and the scale is zeroed so that encodings are deterministic.
FERRY_CODEC_INLINE void zero_row_padding(uint8_t* row, int64_t row_dim) {
  const int64_t aligned = rowwise_row_bytes(row_dim) - 8;
  std::memset(row + row_dim, 0, static_cast<size_t>(aligned - row_dim));
}

// Calls row(values, bytes, stride) for every row: the row's offset in the float32 values and
// in the encoded bytes, and the encoded row's size. The lambdas are force-inlined like the
// helpers, so each clone compiles them for its own ISA.
#define FERRY_CODEC_LAMBDA __attribute__((always_inline))
template <class F>
FERRY_CODEC_INLINE void for_each_row(int64_t rows, int64_t row_dim, F&& row) {
  const int64_t stride = rowwise_row_bytes(row_dim);
  for (int64_t r = 0; r < rows; ++r) row(r * row_dim, r * stride, stride);
}

template <Fp8Layout L>
FERRY_CODEC_INLINE void encode_fp8_rows(const float* x, uint8_t* out, int64_t rows,
                                        int64_t row_dim) {
  for_each_row(rows, row_dim, [&](int64_t v, int64_t b, int64_t stride) FERRY_CODEC_LAMBDA {
    const float* in = x + v;
    uint8_t* row = out + b;
    const float max_abs = std::max(kRowEpsilon, row_max_abs_finite(in, row_dim));
    const float scale = Hfp8Params<L>::kMax / (kRowEpsilon + max_abs);
    for (int64_t i = 0; i < row_dim; ++i) row[i] = float_to_hfp8<L, true>(in[i] * scale);
    zero_row_padding(row, row_dim);
    store_float(row + stride - 8, scale);
    store_float(row + stride - 4, 0.0f);
  });
}

template <Fp8Layout L>
FERRY_CODEC_INLINE void decode_fp8_rows(const uint8_t* q, float* out, int64_t rows,
                                        int64_t row_dim) {
  for_each_row(rows, row_dim, [&](int64_t v, int64_t b, int64_t stride) FERRY_CODEC_LAMBDA {
    const uint8_t* row = q + b;
    const float scale = load_float(row + stride - 8);
    for (int64_t i = 0; i < row_dim; ++i) out[v + i] = hfp8_to_float<L>(row[i]) / scale;
  });
}

// The two 16-bit formats behind one set of loops.
struct Half {
  static uint16_t clamped(float x) { return float_to_half_clamped(x); }
  static uint16_t round(float x) { return float_to_half(x); }
  static float widen(uint16_t h) { return half_to_float(h); }
};
struct BFloat16 {
  static uint16_t clamped(float x) { return float_to_bf16_clamped(x); }
  static uint16_t round(float x) { return float_to_bf16(x); }
  static float widen(uint16_t b) { return bf16_to_float(b); }
};

template <class F>
FERRY_CODEC_INLINE void encode16(const float* x, uint16_t* out, size_t n, float scale) {
  for (size_t i = 0; i < n; ++i) out[i] = F::clamped(x[i] * scale);
}

template <class F>
FERRY_CODEC_INLINE void decode16(const uint16_t* q, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = F::widen(q[i]);
}

template <class F>
FERRY_CODEC_INLINE void decode16_divided(const uint16_t* q, float* out, size_t n, float divisor) {
  for (size_t i = 0; i < n; ++i) out[i] = F::widen(F::round(F::widen(q[i]) / divisor));
}

}  // namespace

FERRY_CODEC_KERNEL void encode_wire16(Wire16 format, const float* x, uint16_t* out, size_t n,
                                      float scale) {
  format == Wire16::Fp16 ? encode16<Half>(x, out, n, scale) : encode16<BFloat16>(x, out, n, scale);
}

FERRY_CODEC_KERNEL void decode_wire16(Wire16 format, const uint16_t* q, float* out, size_t n) {
  format == Wire16::Fp16 ? decode16<Half>(q, out, n) : decode16<BFloat16>(q, out, n);
}

FERRY_CODEC_KERNEL void decode_wire16_divided(Wire16 format, const uint16_t* q, float* out,
                                              size_t n, float divisor) {
  format == Wire16::Fp16 ? decode16_divided<Half>(q, out, n, divisor)
                         : decode16_divided<BFloat16>(q, out, n, divisor);
}

FERRY_CODEC_KERNEL void encode_hfp8(const float* x, uint8_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = float_to_hfp8<Fp8Layout::E4M3, false>(x[i]);
}

FERRY_CODEC_KERNEL void decode_hfp8(const uint8_t* q, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = hfp8_to_float<Fp8Layout::E4M3>(q[i]);
}

FERRY_CODEC_KERNEL void encode_int8_rowwise(const float* x, uint8_t* out, int64_t rows,
                                            int64_t row_dim) {
  for_each_row(rows, row_dim, [&](int64_t v, int64_t b, int64_t stride) FERRY_CODEC_LAMBDA {
    const float* in = x + v;
    uint8_t* row = out + b;
    const RowRange range = row_range(in, row_dim);
    float scale, bias;
    if (range.finite) {
      // As fbgemm; a finite row whose range overflows (max - min = inf) decodes to NaN there too.
      const float span = range.max - range.min;
      scale = span / 255.0f;
      bias = range.min;
      const float inverse = 255.0f / (span + kRowEpsilon);
      // (x - min) * inverse lies in [0, 255]: adding 1.5 * 2^23 rounds it to nearest even
      // (lrintf) and leaves the integer in the low byte of the sum.
      for (int64_t i = 0; i < row_dim; ++i)
        row[i] = static_cast<uint8_t>(bits_of((in[i] - bias) * inverse + kRoundingBias));
    } else {
      scale = bias = float_of(0x7FC00000u);
      std::memset(row, 0, static_cast<size_t>(row_dim));
    }
    zero_row_padding(row, row_dim);
    store_float(row + stride - 8, scale);
    store_float(row + stride - 4, bias);
  });
}

FERRY_CODEC_KERNEL void decode_int8_rowwise(const uint8_t* q, float* out, int64_t rows,
                                            int64_t row_dim) {
  for_each_row(rows, row_dim, [&](int64_t v, int64_t b, int64_t stride) FERRY_CODEC_LAMBDA {
    const uint8_t* row = q + b;
    const float scale = load_float(row + stride - 8);
    const float bias = load_float(row + stride - 4);
    for (int64_t i = 0; i < row_dim; ++i) out[v + i] = static_cast<float>(row[i]) * scale + bias;
  });
}

FERRY_CODEC_KERNEL void encode_fp8_rowwise(const float* x, uint8_t* out, int64_t rows,
                                           int64_t row_dim, Fp8Layout layout) {
  layout == Fp8Layout::E4M3 ? encode_fp8_rows<Fp8Layout::E4M3>(x, out, rows, row_dim)
                            : encode_fp8_rows<Fp8Layout::E5M2>(x, out, rows, row_dim);
}

FERRY_CODEC_KERNEL void decode_fp8_rowwise(const uint8_t* q, float* out, int64_t rows,
                                           int64_t row_dim, Fp8Layout layout) {
  layout == Fp8Layout::E4M3 ? decode_fp8_rows<Fp8Layout::E4M3>(q, out, rows, row_dim)
                            : decode_fp8_rows<Fp8Layout::E5M2>(q, out, rows, row_dim);
}

}  // namespace ferry::torchrec::detail
