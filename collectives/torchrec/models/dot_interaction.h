// ferry::torchrec::dot_interaction: DLRM's pairwise dot-product interaction as ONE tape node
// with hand-written forward and backward kernels.
//
// For each sample b, with X_0 = dense_out[b] and X_k = sparse[b, (k-1)D : kD) (k = 1..F):
//   out[b] = cat(dense_out[b], (X_i . X_j for i < j, row-major: (0,1), (0,2), ..., (0,F),
//                               (1,2), ..., (F-1,F)))                      [D + F(F+1)/2]
// which is what torchrec's InteractionArch computes with bmm, triu_indices and cat; here no
// [B, F+1, F+1] product, transposed copy or index gather is made. Each dot sums d = 0, 1, ...
// in the inputs' dtype. Backward: with G[b] the symmetric matrix of the pairs' gradients (zero
// diagonal), dX_i = sum over j != i, ascending, of G[i][j] X_j; dense_out's gradient adds the
// gradient of its pass-through columns.
#pragma once

#include <ferry/autograd/variable.h>

#include <cstdint>

namespace ferry::torchrec {

// dense_out [B, D], sparse [B, F*D] (float32 or float64, one dtype) -> [B, D + F(F+1)/2].
// InvalidArgument naming the shapes when they do not fit num_sparse_features F.
Variable dot_interaction(const Variable& dense_out, const Variable& sparse,
                         int64_t num_sparse_features);

}  // namespace ferry::torchrec
