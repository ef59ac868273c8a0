// Internal helpers the jagged types share (not installed): reading and writing the index tensors
// (lengths, offsets: int32 or int64) as int64 vectors, the dtype checks, and the one data-moving
// kernel of the family, the permutation of jagged segments (used by KeyedJaggedTensor::permute
// and by the receiving side of the KJT all-to-all, kjt_dist_init).
#pragma once

#include <ferry/collectives/torchrec/sparse/bucketize.h>
#include <ferry/collectives/torchrec/utils/format.h>
#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::torchrec::detail {

// Throws InvalidArgument "<where>: <what> must be a 1-D int32 or int64 tensor, got ..." unless
// `t` is defined, 1-D and int32/int64.
void check_index_tensor(const Tensor& t, const char* where, const char* what);
// Elements of a 1-D int32 / int64 tensor as int64.
std::vector<int64_t> index_vector(const Tensor& t);
// The same into `out` (its capacity reused).
void index_vector_into(const Tensor& t, std::vector<int64_t>& out);
// A new 1-D tensor of `dtype` (Int32 or Int64) holding v; throws InvalidArgument naming `where`
// when a value does not fit int32.
Tensor index_tensor(const std::vector<int64_t>& v, DType dtype, const char* where);

// Sum of lengths[begin, end) of a 1-D int32 / int64 tensor, and whether any is negative: one
// vectorised pass (every KJT built, and every segment a KJT all-to-all places, is checked so).
struct LengthsSum {
  int64_t sum = 0;
  bool negative = false;
};
LengthsSum sum_lengths(const Tensor& lengths, int64_t begin, int64_t end);

// [0, l0, l0+l1, ...] (n+1 entries) of the same dtype as `lengths`; throws when int32 overflows.
Tensor offsets_from_lengths(const Tensor& lengths, const char* where);
// offsets[i+1] - offsets[i] (n entries) of the same dtype as `offsets` (which has n+1 >= 1).
Tensor lengths_from_offsets(const Tensor& offsets);

// Jagged data: `lengths` (1-D index tensor), `values` (rows along dim 0, sum(lengths) rows),
// optional `weights` (one per value row; undefined for none).
struct JaggedParts {
  Tensor lengths;
  Tensor values;
  Tensor weights;
};

// Cuts `lengths` into consecutive segments, segment i holding `segment_sizes[i]` length entries
// (sum(segment_sizes) == lengths.numel()), together with the value rows (and weights) those
// entries cover, and returns the segments in the order `order` (output segment q = input segment
// order[q]; an index may repeat or be left out). Copies; dtypes and the trailing dims of values
// are kept. Indices are checked (InvalidArgument naming `where`).
JaggedParts permute_segments(const JaggedParts& in, const std::vector<int64_t>& segment_sizes,
                             const std::vector<int64_t>& order, const char* where);

// Copies, for every index of the dims before `dim`, the slab [start, start+length) along `dim`
// of `src` into `dst` at [dst_start, dst_start+length) along `dim`. src and dst have the same
// dtype and the same dims except `dim`. Used by KeyedTensor for per-key columns.
void copy_slab(const Tensor& src, int64_t dim, int64_t start, int64_t length, Tensor& dst,
               int64_t dst_start);

// Copies every block, row by row: src and dst are 2-D with the same rows and dtype, the blocks
// lie inside both. One pass over the rows, where a copy_slab per block would walk the whole
// tensor once per block (26 passes for DLRM's pooled embeddings, each missing the cache).
// ColumnBlock is declared in bucketize.h, whose PermutePooledEmbeddingsSplit keeps its blocks.
void copy_column_blocks(const Tensor& src, Tensor& dst, const std::vector<ColumnBlock>& blocks);

}  // namespace ferry::torchrec::detail
