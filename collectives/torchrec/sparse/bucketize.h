// Row-wise input bucketization (torchrec's embedding_sharding.bucketize_kjt_before_all2all over
// fbgemm's block_bucketize_sparse_features), and the column permutation of pooled embeddings for
// column-wise sharding (torchrec's PermutePooledEmbeddingsSplit / fbgemm's permute_pooled_embs).
// Local computations: nothing here communicates.
//
// Bucketization: a table of hash size H sharded row-wise over N ranks keeps rows
// [p*bs, (p+1)*bs) on rank p (bs = block size, ceil(H / N)). For key t with block size bs_t an
// id v goes to bucket p = v / bs_t when v < bs_t * N, otherwise p = v % N; the id stored is
// v % bs_t (its row inside the shard), or v itself with keep_original_indices. With
// block_bucketize_row_pos (uneven shards) key t's bucket p holds rows
// [row_pos[t][p], row_pos[t][p+1]) and the stored id is v - row_pos[t][p].
//
// The result's keys are the input's keys repeated num_buckets times (bucket-major; duplicates
// allowed), its lengths are [bucket][key][sample] and its values keep their relative order
// inside every (bucket, key, sample) bag. KJTAllToAll(group, splits = [K] * N) then sends bucket
// p to rank p. Weights follow their values. With bucketize_pos the weights are replaced by each
// id's position inside its original bag (float32; fbgemm returns them as ints). With
// output_permute the result carries unbucketize_permute (int64, one per value): the position
// in the bucketized values of original value i; index-selecting a tensor in bucketized order
// with it (out[i] = bucketized[unbucketize_permute[i]]) restores the original order, which is
// what the sequence embedding dist does with the embeddings it gets back.
//
// Throws InvalidArgument for num_buckets < 1, block sizes that are not one positive entry per
// key, negative ids, and (with row_pos) an id outside [0, row_pos[t].back()) or row_pos lists
// that are not num_buckets + 1 non-decreasing entries from 0 per key. Variable stride per key
// is kept (stride_per_key_per_rank repeated for every bucket).
#pragma once

#include <ferry/collectives/torchrec/sparse/keyed_jagged_tensor.h>
#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace ferry::torchrec {

struct BucketizedKjt {
  KeyedJaggedTensor kjt;
  std::optional<Tensor> unbucketize_permute;  // only with output_permute
};

BucketizedKjt bucketize_kjt_before_all2all(
    const KeyedJaggedTensor& kjt, int64_t num_buckets, const std::vector<int64_t>& block_sizes,
    bool output_permute = false, bool bucketize_pos = false,
    const std::optional<std::vector<std::vector<int64_t>>>& block_bucketize_row_pos = std::nullopt,
    bool keep_original_indices = false);
// block_sizes as a 1-D int32/int64 tensor, as torchrec passes it.
BucketizedKjt bucketize_kjt_before_all2all(
    const KeyedJaggedTensor& kjt, int64_t num_buckets, const Tensor& block_sizes,
    bool output_permute = false, bool bucketize_pos = false,
    const std::optional<std::vector<std::vector<int64_t>>>& block_bucketize_row_pos = std::nullopt,
    bool keep_original_indices = false);

// Pooled embeddings [B, sum(dims)] whose column blocks have widths `dims`; returns the blocks
// in the order `permute` (output block i = input block permute[i], a permutation of
// 0..dims.size()-1). 2-D tensors of any dtype; a copy.
Tensor permute_pooled_embs(const Tensor& embs, const std::vector<int64_t>& dims,
                           const std::vector<int64_t>& permute);

// torchrec's PermutePooledEmbeddingsSplit as a value: the forward permutation and its inverse
// (for the gradient, which flows back through the inverse permutation of the output blocks).
namespace detail {
// A block of columns of a 2-D tensor: `width` columns from src_col of the source to dst_col of
// the destination.
struct ColumnBlock {
  int64_t src_col = 0;
  int64_t dst_col = 0;
  int64_t width = 0;
};
}  // namespace detail

class PermutePooledEmbeddingsSplit {
 public:
  PermutePooledEmbeddingsSplit(std::vector<int64_t> embs_dims, std::vector<int64_t> permute);
  Tensor operator()(const Tensor& embs) const;  // forward
  Tensor inverse(const Tensor& permuted) const;  // undoes operator(); the gradient's map
  const std::vector<int64_t>& dims() const { return dims_; }
  const std::vector<int64_t>& permute() const { return permute_; }

 private:
  // Both directions' block moves, computed once: a call then only makes its output.
  Tensor move(const Tensor& embs, const std::vector<detail::ColumnBlock>& blocks) const;

  std::vector<int64_t> dims_, permute_;
  int64_t width_ = 0;  // sum of dims_
  std::vector<detail::ColumnBlock> forward_, inverse_;
};

}  // namespace ferry::torchrec
