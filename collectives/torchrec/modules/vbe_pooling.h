// Variable batch per feature (VBE) for the pooled collections: torchrec's layout, on ferry's
// lookups.
//
// A VBE KJT gives key k its own batch B_k (stride_per_key_per_rank) and carries
// inverse_indices: per key, B_out entries mapping each output sample to one of the key's B_k
// (deduplicated) samples. torchrec's EmbeddingBagCollection pools every key over its own B_k
// bags and expands the result with the inverse indices (fbgemm group_index_select_dim0 /
// batch_index_select_dim0), so the output is the usual KeyedTensor [B_out, sum dims]:
//
//   out[b, columns of feature f] = pooled_f[inverse_indices[f][b]]
//
// ferry reuses the uniform-stride lookup: the KJT is padded to B_max = max B_k with empty bags
// (no values added, so per-sample weights are unchanged; an empty bag pools to zeros and gets
// no gradient), and the result is gathered with index_select, whose backward scatter-adds, so
// an output row read twice through the inverse indices sends both gradients to its bag.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/group.h>
#include <ferry/collectives/torchrec/sparse/keyed_jagged_tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::torchrec::detail {

// The VBE KJT with every key's batch padded to B_max by empty bags (uniform stride B_max);
// keys, values and weights unchanged. A KJT without variable stride is returned as it is.
KeyedJaggedTensor pad_variable_stride(const KeyedJaggedTensor& kjt);

// Where the pooled rows of one (feature, column range) sit in a flat Variable: row b (b < the
// feature's batch), column d < width is element start + b * row_stride + d.
struct VbeBlock {
  int feature = 0;          // position in the collection's feature list
  int64_t col_offset = 0;   // first column of the feature's table this block holds
  int64_t width = 0;
  int64_t start = 0;
  int64_t row_stride = 0;
};

// The inverse-index rows of `features` (by name) from the KJT's inverse_indices: one vector of
// B_out entries per feature, checked against each feature's batch (InvalidArgument naming `op`,
// the feature and the index). Throws when the KJT has none.
std::vector<std::vector<int64_t>> inverse_rows(const KeyedJaggedTensor& kjt,
                                               const std::vector<std::string>& features,
                                               const char* op);
// The same for a sharded collection: its errors also name the rank and `group`.
std::vector<std::vector<int64_t>> inverse_rows(const KeyedJaggedTensor& kjt,
                                               const std::vector<std::string>& features,
                                               const char* op, const Group& group);

// The output [B_out, sum(dims)] (columns: the features in order, dims[f] each) gathered from
// `flat` (1-D) through the blocks (which must tile every feature's columns) and the inverse
// rows. One index_select: differentiable.
Variable gather_vbe_output(const Variable& flat, const std::vector<VbeBlock>& blocks,
                           const std::vector<int64_t>& dims,
                           const std::vector<std::vector<int64_t>>& inverse);

// index_select of the flat elements `index` of x (any shape), as a 1-D Variable.
Variable flat_select(const Variable& x, const std::vector<int64_t>& index);

}  // namespace ferry::torchrec::detail
