// The numeric kernels of the quantized comm codecs: float32 to and from the wire formats of
// fbgemm_gpu's quantize_comm. Internal: the codecs in fbgemm_qcomm_codec.h call these on tensor
// storage; the tests call them directly to pin exact bit patterns.
//
// Every kernel is one pass over contiguous memory, written so that the compiler vectorises it
// (branch-free selects, no calls), and built in three variants chosen at load time (x86-64-v4,
// -v3 and the baseline) with floating-point contraction off, so every variant rounds exactly
// like the scalar definition. Eigen's half / bfloat16 conversions, which the runtime uses
// elsewhere, run at 0.7 GB/s (half) on this machine: too slow for the codec budget.
//
// Formats (bit patterns as uint16_t / uint8_t):
//   fp16   IEEE binary16, round to nearest even.
//   bf16   bfloat16, round to nearest even; NaN -> 0x7FC0 (torch's rule: the sign is dropped).
//   hfp8   fbgemm's "HFP8": sign, 4 exponent bits (bias 15), 3 mantissa bits, no inf/NaN;
//          largest value 0.9375 (0x77). The row-wise variant "1-5-2" has 5 exponent bits
//          (bias 31), 2 mantissa bits, largest value 0.875 (0x7B).
//   int8   fbgemm's fused 8-bit row-wise layout (below).
//
// Row-wise layouts (fbgemm FloatToFused8BitRowwiseQuantized / FloatToFP8RowwiseQuantized, GPU
// layout): every row of `row_dim` floats becomes align4(row_dim) + 8 bytes:
//   [row_dim codes][zero padding to a multiple of 4][float32 scale][float32 bias]
// int8:  scale = (max - min) / 255, bias = min, code = rint((x - min) * 255 / (range + 1e-20)),
//        value = code * scale + bias.
// fp8:   scale = max_pos / (1e-20 + max(1e-20, max |x|)), bias slot = 0,
//        code = hfp8(x * scale), value = hfp8_value(code) / scale.
//
// Non-finite values (ferry's rule; the original's results depend on the kernel, see
// fbgemm_qcomm_codec.h): fp16 / bf16 / hfp8 encoders clamp +-inf to the format's largest finite
// value as the originals do and keep NaN a NaN (hfp8 has no NaN: ferry sends code 0x7F, which
// the original encoder never produces). The fp8 row-wise encoder takes its scale from the
// finite values of the row and sends NaN as 0x7F/0xFF and +-inf as 0x7E/0xFE; every hfp8
// decoder maps those four codes back. An int8 row holding any NaN or inf decodes to NaN
// throughout (scale and bias are NaN): one byte per value has no room for a marker.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry::torchrec::detail {

// The two fbgemm 8-bit float layouts. E4M3 is the forward one ("1-4-3"), E5M2 the backward one
// ("1-5-2"); both with fbgemm's biases (15 and 31), not those of OCP FP8.
enum class Fp8Layout { E4M3, E5M2 };

inline constexpr float kHfp8MaxE4M3 = 0.9375f;  // 2^(14-15) * (2 - 2^-3)
inline constexpr float kHfp8MaxE5M2 = 0.875f;   // 2^(30-31) * (2 - 2^-2)
inline constexpr uint8_t kHfp8NaN = 0x7F;
inline constexpr uint8_t kHfp8PosInf = 0x7E;
inline constexpr uint8_t kHfp8NegInf = 0xFE;

inline constexpr float kFp16Max = 65504.0f;
inline constexpr float kBf16Max = 3.38953139e38f;  // 0x7F7F

// Bytes of one encoded row: align4(row_dim) + 2 * sizeof(float). row_dim > 0.
inline int64_t rowwise_row_bytes(int64_t row_dim) { return (row_dim + 3) / 4 * 4 + 8; }

// The two 16-bit wire formats (FP16 and BF16 codecs).
enum class Wire16 { Fp16, Bf16 };

// out[i] = format(clamp(x[i] * scale, -max, max)) with max 65504 (fp16) or 3.3895314e38
// (bf16). scale 1 is exact (no loss scale).
void encode_wire16(Wire16 format, const float* x, uint16_t* out, size_t n, float scale);
// out[i] = float(q[i]).
void decode_wire16(Wire16 format, const uint16_t* q, float* out, size_t n);
// out[i] = float(format(float(q[i]) / divisor)): the original divides the still-encoded tensor
// by the loss scale in half precision (float arithmetic, one rounding to the format, no clamp:
// a divisor below 1 can overflow to inf).
void decode_wire16_divided(Wire16 format, const uint16_t* q, float* out, size_t n,
                           float divisor);

// fbgemm fp32_to_hfp8_with_clamp(x, ebits 4, mbits 3, bias 15) and hfp8_to_fp32 (E4M3 only:
// the element-wise FP8 codec has no 1-5-2 form).
void encode_hfp8(const float* x, uint8_t* out, size_t n);
void decode_hfp8(const uint8_t* q, float* out, size_t n);

// Row-wise kernels: `rows` rows of `row_dim` floats <-> rows * rowwise_row_bytes(row_dim) bytes.
void encode_int8_rowwise(const float* x, uint8_t* out, int64_t rows, int64_t row_dim);
void decode_int8_rowwise(const uint8_t* q, float* out, int64_t rows, int64_t row_dim);
void encode_fp8_rowwise(const float* x, uint8_t* out, int64_t rows, int64_t row_dim,
                        Fp8Layout layout);
void decode_fp8_rowwise(const uint8_t* q, float* out, int64_t rows, int64_t row_dim,
                        Fp8Layout layout);

}  // namespace ferry::torchrec::detail
