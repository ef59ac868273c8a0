// The KJT's wire form for the two-phase KJT all-to-all (torchrec's KeyedJaggedTensor.dist_labels /
// dist_splits / dist_tensors / dist_init and dist_data's _get_recat). Local computations only:
// nothing here communicates.
//
// How KJTAllToAll(group, key_splits, stagger) is meant to use them, on rank me of W:
//
//   sender    labels = kjt_dist_labels(kjt)            "lengths", "values", ["strides"], ["weights"]
//             counts = kjt_dist_splits(kjt, key_splits) [label][destination], elements to send
//             bufs   = kjt_dist_tensors(kjt)            one flat 1-D tensor per label, the part for
//                                                       destination j is its counts[label][j]
//                                                       consecutive elements (keys ordered by
//                                                       destination rank)
//   phase 1   row j = counts[.][j] (+ kjt.stride() when !kjt.variable_stride_per_key()): one
//             equal-split all_to_all of W rows; received row s = what source s sends me, so
//             out_counts[label][s], and the extra column is stride_per_rank[s].
//   phase 2   per label: all_to_all_single(bufs[label], in = counts[label], out = out_counts[label]).
//   receiver  recat = get_recat(key_splits[me], W, stagger);
//             out = kjt_dist_init(my keys, received tensors in label order,
//                                 kjt.variable_stride_per_key(), W, recat, stride_per_rank).
//
// Received buffers are source-major ([source][local key][sample]); kjt_dist_init permutes the
// (source, key) segments into key-major order with the recat, at per-sample granularity (each
// segment keeps its own sample count, so unequal batch sizes per rank need no special case).
#pragma once

#include <ferry/collectives/torchrec/sparse/keyed_jagged_tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ferry::torchrec {

// "lengths", "values", then "strides" when kjt.variable_stride_per_key(), then "weights" when
// weighted.
std::vector<std::string> kjt_dist_labels(const KeyedJaggedTensor& kjt);

// [label][destination]: elements of each label (kjt_dist_labels order) that go to destination j
// when destination j gets the next key_splits[j] keys. lengths: sum of the strides of those
// keys; values and weights: sum of their length_per_key; strides: key_splits[j]. Throws
// InvalidArgument unless key_splits are non-negative and sum to num_keys().
std::vector<std::vector<int64_t>> kjt_dist_splits(const KeyedJaggedTensor& kjt,
                                                  const std::vector<int64_t>& key_splits);

// The tensors to send, in label order: lengths, values, [stride_per_key as int64],
// [weights]. Flat, contiguous, 1-D; shares storage with the KJT where it can.
std::vector<Tensor> kjt_dist_tensors(const KeyedJaggedTensor& kjt);

namespace detail {
// The three above into lists the caller keeps from call to call (a KJT all-to-all per training
// step): their contents are replaced, their capacity reused.
void kjt_dist_labels_into(const KeyedJaggedTensor& kjt, std::vector<std::string>& labels);
void kjt_dist_splits_into(const KeyedJaggedTensor& kjt, const std::vector<int64_t>& key_splits,
                          std::vector<std::vector<int64_t>>& splits);
void kjt_dist_tensors_into(const KeyedJaggedTensor& kjt, std::vector<Tensor>& tensors);
}  // namespace detail

// torchrec's _get_recat: the segment permutation that turns [source][local key] order into
// [local key][source] order, sources taken in stagger order. nullopt when local_split == 0.
// recat[t * W + i] = t + order[i] * local_split, order = [x + (W/stagger)*y for x < W/stagger
// for y < stagger]. (2,4,1) -> [0,2,4,6,1,3,5,7]; (2,4,2) -> [0,4,2,6,1,5,3,7]. Throws unless
// stagger >= 1 divides num_splits.
std::optional<std::vector<int64_t>> get_recat(int64_t local_split, int64_t num_splits,
                                              int64_t stagger = 1);

// The KJT a rank builds from what it received (torchrec's dist_init). `tensors` in label order
// (lengths, values, [strides], [weights]), source-major. Without variable stride per key,
// stride_per_rank[s] is source s's batch size and the result has stride sum(stride_per_rank);
// with it, `strides` holds stride_per_key of each (source, key) and the result has
// stride_per_key_per_rank[t] = those strides of key t in recat source order. `recat` (from
// get_recat; size keys.size() * num_workers) may be nullopt only when there are no keys or one
// worker. Validates everything a KJT constructor does (errors name "kjt_dist_init").
KeyedJaggedTensor kjt_dist_init(std::vector<std::string> keys, const std::vector<Tensor>& tensors,
                                bool variable_stride_per_key, int64_t num_workers,
                                const std::optional<std::vector<int64_t>>& recat,
                                const std::vector<int64_t>& stride_per_rank);

}  // namespace ferry::torchrec
