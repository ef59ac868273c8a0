// The dot interaction's kernels for float rows of a multiple of 8 values on AVX2: eight samples
// at a time, one sample per lane of a register (internal to dot_interaction.cpp).
//
// With the samples in the lanes, the dot of a pair is D multiply-adds of whole registers, each
// a useful product; the row kernels of dot_interaction.cpp, which vectorise along a sample's
// rows, compute every chunk of 16 columns of a Gram row, half of it below the diagonal or in
// the padding, and spend a broadcast per product in backward. Both sum every value in the same
// order from zero with the same fused multiply-adds, so they give the same bits; these are
// about 1.2x (forward) and 1.3x (backward) faster at DLRM's shape (26 features of 16 values).
#pragma once

#include <cstdint>

namespace ferry::torchrec::detail {

// X_k of sample b: the dense output for k = 0, embedding k - 1 otherwise.
template <class T>
const T* feature_row(const T* dense, const T* sparse, int64_t b, int64_t k, int64_t F,
                     int64_t D) {
  return k == 0 ? dense + b * D : sparse + (b * F + (k - 1)) * D;
}

// Where row i's pairs (i, i+1), ..., (i, n-1) start in a sample's pair columns.
inline int64_t first_pair(int64_t i, int64_t n) { return i * (n - 1) - i * (i - 1) / 2; }

// Whether these kernels take rows of D values: built with AVX2 and D a multiple of 8.
bool lanes_fit(int64_t D);

// out [B, D + n(n-1)/2] from dense [B, D] and sparse [B, F * D], n = F + 1.
void forward_lanes(const float* dense, const float* sparse, float* out, int64_t B, int64_t F,
                   int64_t D);

// d_dense [B, D] and d_sparse [B, F * D] from the output's gradient grad.
void backward_lanes(const float* dense, const float* sparse, const float* grad, float* d_dense,
                    float* d_sparse, int64_t B, int64_t F, int64_t D);

}  // namespace ferry::torchrec::detail
