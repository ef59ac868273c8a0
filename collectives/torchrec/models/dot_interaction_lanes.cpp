#include <ferry/collectives/torchrec/models/dot_interaction_lanes.h>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ferry::torchrec::detail {

#if defined(__AVX2__)

namespace {

constexpr int kSamples = 8;  // samples per group: the lanes of an AVX2 register of floats

// Per-thread scratch reused across calls, aligned to a register: the step allocates nothing
// here once warm.
__m256* scratch_registers(size_t count) {
  thread_local std::vector<float> buffer;
  const size_t floats = count * kSamples + kSamples;  // the slack for the alignment
  if (buffer.size() < floats) buffer.resize(floats);
  return reinterpret_cast<__m256*>((reinterpret_cast<uintptr_t>(buffer.data()) + 31) / 32 * 32);
}

// An 8 x 8 tile of floats transposed in registers: r[q] holds row q before, column q after.
[[gnu::always_inline]] inline void transpose_8x8(__m256 (&r)[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  // s0 = columns 0 and 4 of rows 0-3, s1 = columns 1 and 5, ...; s4-s7 the same of rows 4-7.
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// Why tiles in forward: with a sample in each lane a dot is a chain of fused multiply-adds on
// whole registers, and what limits them is feeding those: one row against eight (the lanes'
// natural block) loads nine registers for eight multiply-adds. A tile of 3 rows by 4 keeps 12
// sums in registers and loads 7 registers for their 12 multiply-adds, and computes fewer dots
// past a row's last pair (6720 multiply-adds per eight samples at DLRM's 27 rows, against 7168).
// Each dot still starts from zero and adds d = 0, 1, ... in order: the same bits. Backward keeps
// one row against eight values of d: tiles there were slower (the gradient of each pair is
// gathered from two places, which costs the loads the tile saves).
constexpr int kTileRows = 3;
constexpr int kTileCols = 4;

// The dots of rows i0..i0 + kRows - 1 with rows j0..j0 + 3 of the group, each stored at its
// pair's place in `pairs`; a tile position that is no pair (j <= i, or j past the last row,
// whose lanes are zero) is computed and dropped.
template <int kRows>
[[gnu::always_inline]] inline void tile_dots(const __m256* lanes, int64_t i0, int64_t j0,
                                             int64_t n, int64_t D, __m256* pairs) {
  __m256 acc[kRows][kTileCols];
  for (auto& row : acc)
    for (__m256& a : row) a = _mm256_setzero_ps();
  const __m256* xi = lanes + i0 * D;
  const __m256* xj = lanes + j0 * D;
  for (int64_t d = 0; d < D; ++d) {
    __m256 a[kRows];
    for (int r = 0; r < kRows; ++r) a[r] = xi[r * D + d];
    for (int q = 0; q < kTileCols; ++q) {
      const __m256 b = xj[q * D + d];
      for (int r = 0; r < kRows; ++r) acc[r][q] = _mm256_fmadd_ps(a[r], b, acc[r][q]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    const int64_t i = i0 + r;
    __m256* row = pairs + first_pair(i, n) - i - 1;  // row[j]: pair (i, j), j > i
    for (int q = 0; q < kTileCols; ++q) {
      const int64_t j = j0 + q;
      if (j > i && j < n) row[j] = acc[r][q];
    }
  }
}

// Rows X_0..X_F of samples b0..b0 + count - 1 by lanes: lanes[k * D + d] holds X_k[d] of the
// group's samples (zero in the lanes past count).
void to_lanes(const float* dense, const float* sparse, int64_t b0, int64_t count, int64_t F,
              int64_t D, const float* zero_row, __m256* lanes) {
  for (int64_t k = 0; k <= F; ++k) {
    const float* rows[kSamples];
    for (int64_t q = 0; q < kSamples; ++q)
      rows[q] = q < count ? feature_row(dense, sparse, b0 + q, k, F, D) : zero_row;
    for (int64_t d0 = 0; d0 < D; d0 += 8) {
      __m256 r[8];
      for (int q = 0; q < 8; ++q) r[q] = _mm256_loadu_ps(rows[q] + d0);
      transpose_8x8(r);
      for (int q = 0; q < 8; ++q) lanes[k * D + d0 + q] = r[q];
    }
  }
}

}  // namespace

void forward_lanes(const float* dense, const float* sparse, float* out, int64_t B, int64_t F,
                   int64_t D) {
  const int64_t n = F + 1, P = n * (n - 1) / 2, width = D + P;
  const int64_t padded_pairs = (P + kSamples - 1) / kSamples * kSamples;
  // The rows are followed by kSamples - 1 zero rows, which the last tiles of a row read; then
  // the pairs by lanes (zero past the last pair: the last transpose reads them), then a zero
  // row standing in for the samples past the last.
  const int64_t lane_rows = n + kSamples - 1;
  const int64_t pair_registers = padded_pairs + kSamples;
  const int64_t zero_registers = (D + kSamples - 1) / kSamples;
  __m256* lanes = scratch_registers(static_cast<size_t>(lane_rows * D + pair_registers +
                                                        zero_registers));
  __m256* pairs = lanes + lane_rows * D;
  auto* zero_row = reinterpret_cast<float*>(pairs + pair_registers);
  std::fill(zero_row, zero_row + D, 0.0f);
  for (int64_t k = n * D; k < lane_rows * D; ++k) lanes[k] = _mm256_setzero_ps();
  for (int64_t p = P; p < padded_pairs; ++p) pairs[p] = _mm256_setzero_ps();
  for (int64_t b0 = 0; b0 < B; b0 += kSamples) {
    const int64_t count = std::min<int64_t>(kSamples, B - b0);  // samples in this group
    to_lanes(dense, sparse, b0, count, F, D, zero_row, lanes);
    // Rows 0..n-2 have pairs (row n-1 has none), in tiles of three rows.
    for (int64_t i0 = 0; i0 + 1 < n; i0 += kTileRows) {
      const int64_t rows = std::min<int64_t>(kTileRows, n - 1 - i0);
      for (int64_t j0 = i0 + 1; j0 < n; j0 += kTileCols) {
        if (rows == 3) tile_dots<3>(lanes, i0, j0, n, D, pairs);
        else if (rows == 2) tile_dots<2>(lanes, i0, j0, n, D, pairs);
        else tile_dots<1>(lanes, i0, j0, n, D, pairs);
      }
    }
    for (int64_t q = 0; q < count; ++q)
      std::copy(dense + (b0 + q) * D, dense + (b0 + q + 1) * D, out + (b0 + q) * width);
    for (int64_t p0 = 0; p0 < padded_pairs; p0 += 8) {
      __m256 r[8];
      for (int q = 0; q < 8; ++q) r[q] = pairs[p0 + q];
      transpose_8x8(r);  // r[q]: pairs p0.. of sample q
      const int64_t take = std::min<int64_t>(8, P - p0);
      for (int64_t q = 0; q < count; ++q) {
        float* dst = out + (b0 + q) * width + D + p0;
        if (take == 8) {
          _mm256_storeu_ps(dst, r[q]);
        } else {
          alignas(32) float tail[8];
          _mm256_store_ps(tail, r[q]);
          std::copy(tail, tail + take, dst);
        }
      }
    }
  }
}

// The backward in the same layout: dX_i[d] of eight samples is one register, summed over j != i
// in ascending order from zero as the row kernel sums it (the same bits); each pass computes 8
// values of d of one row i, with the pairs' gradients G[i][j] gathered by lanes beforehand.
void backward_lanes(const float* dense, const float* sparse, const float* grad, float* d_dense,
                    float* d_sparse, int64_t B, int64_t F, int64_t D) {
  const int64_t n = F + 1, P = n * (n - 1) / 2, width = D + P;
  const int64_t padded_pairs = (P + kSamples - 1) / kSamples * kSamples;
  // The rows by lanes, the pairs' gradients by lanes, then D + padded_pairs zeros standing in
  // for the samples past the last.
  const int64_t zero_registers = (D + padded_pairs + kSamples - 1) / kSamples;
  __m256* lanes = scratch_registers(static_cast<size_t>(n * D + padded_pairs + zero_registers));
  __m256* g = lanes + n * D;  // g[p]: the gradient of pair p, by lanes
  auto* zero_row = reinterpret_cast<float*>(g + padded_pairs);
  std::fill(zero_row, zero_row + D + padded_pairs, 0.0f);
  for (int64_t b0 = 0; b0 < B; b0 += kSamples) {
    const int64_t count = std::min<int64_t>(kSamples, B - b0);
    to_lanes(dense, sparse, b0, count, F, D, zero_row, lanes);
    for (int64_t p0 = 0; p0 < padded_pairs; p0 += 8) {
      __m256 r[8];
      for (int64_t q = 0; q < 8; ++q) {
        const float* src = q < count ? grad + (b0 + q) * width + D + p0 : zero_row;
        if (p0 + 8 <= P) {
          r[q] = _mm256_loadu_ps(src);
        } else {  // the last pairs: past them lie the next sample's (or nothing)
          alignas(32) float tail[8] = {};
          std::copy(src, src + (P - p0), tail);
          r[q] = _mm256_load_ps(tail);
        }
      }
      transpose_8x8(r);
      for (int q = 0; q < 8; ++q) g[p0 + q] = r[q];
    }
    for (int64_t i = 0; i < n; ++i) {
      const __m256* g_upper = g + first_pair(i, n) - i - 1;  // G[i][j] = g_upper[j] for j > i
      for (int64_t d0 = 0; d0 < D; d0 += 8) {
        __m256 a[8];
        for (int t = 0; t < 8; ++t) a[t] = _mm256_setzero_ps();
        auto add = [&](int64_t j, __m256 gij) {
          const __m256* xj = lanes + j * D + d0;
          for (int t = 0; t < 8; ++t) a[t] = _mm256_fmadd_ps(gij, xj[t], a[t]);
        };
        for (int64_t j = 0; j < i; ++j) add(j, g[first_pair(j, n) + (i - j - 1)]);
        for (int64_t j = i + 1; j < n; ++j) add(j, g_upper[j]);
        transpose_8x8(a);  // a[q]: values d0.. of sample q
        for (int64_t q = 0; q < count; ++q) {
          const int64_t b = b0 + q;
          if (i == 0) {
            const __m256 pass = _mm256_loadu_ps(grad + b * width + d0);
            _mm256_storeu_ps(d_dense + b * D + d0, _mm256_add_ps(pass, a[q]));
          } else {
            _mm256_storeu_ps(d_sparse + (b * F + (i - 1)) * D + d0, a[q]);
          }
        }
      }
    }
  }
}

bool lanes_fit(int64_t D) { return D % 8 == 0; }

#else

bool lanes_fit(int64_t) { return false; }
void forward_lanes(const float*, const float*, float*, int64_t, int64_t, int64_t) {}
void backward_lanes(const float*, const float*, const float*, float*, float*, int64_t, int64_t,
                    int64_t) {}

#endif

}  // namespace ferry::torchrec::detail
