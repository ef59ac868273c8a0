// torchrec's SequenceEmbeddingsAllToAll (dist_data.py): the output dist of sequence (unpooled)
// embeddings, which sends one embedding row per id back to the rank that sent the id in the input
// dist (KJTAllToAll). Used by table-wise, column-wise and row-wise sharding of an
// EmbeddingCollection; with row-wise sharding the unbucketize permutation of
// bucketize_kjt_before_all2all restores the ids' original order.
//
//   KJTAllToAll input_dist(group, features_per_rank);
//   KJTAllToAllTensorsAwaitable p2 = input_dist(kjt).wait();
//   KeyedJaggedTensor mine = p2.wait();
//   Variable e = lookup(mine);                                  // [ids received, D]
//   SequenceEmbeddingsAllToAll output_dist(group, features_per_rank);
//   Variable back = output_dist.forward(e, mine.lengths(), p2.input_splits("values"),
//                                       p2.output_splits("values")).wait();
//   // back: [ids of kjt, D], row i = the embedding of kjt.values()[i]
//
// Unequal batch sizes per rank: pass batch_size_per_rank (p2.stride_per_rank()) and the
// per-sample recat of the input dist (sequence_sparse_features_recat(p2)). The module's own
// recats assume the input dist's stagger was 1; after a staggered input dist pass
// sequence_sparse_features_recat(p2) too (it follows whatever recat the input dist applied).
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/group.h>
#include <ferry/collectives/torchrec/comm/comm_ops.h>
#include <ferry/collectives/torchrec/dist_data/embeddings_awaitable.h>
#include <ferry/collectives/torchrec/dist_data/kjt_all_to_all.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace ferry::torchrec {

// fbgemm's expand_into_jagged_permute: `permute` reorders segments (output segment q = input
// segment permute[q]) and input segment i has input_segment_sizes[i] entries; the result is the
// same reordering entry by entry (int64, sum(sizes) entries): entry k of the output = entry
// result[k] of the input.
Tensor expand_into_jagged_permute(const std::vector<int64_t>& permute,
                                  const std::vector<int64_t>& input_segment_sizes);

// The input dist's recat expanded to one entry per length entry (torchrec's
// sparse_features_recat, what KJTAllToAll applied at per-sample granularity): output position
// (key-major) -> position in the received source-major buffer. Needs a uniform stride per key
// (stride_per_rank() not empty). Empty (undefined) when the rank received no keys.
Tensor sequence_sparse_features_recat(const KJTAllToAllTensorsAwaitable& input_dist);

class SequenceEmbeddingsAllToAll {
 public:
  // features_per_rank[i]: number of features rank i looks up (the input dist's key splits).
  SequenceEmbeddingsAllToAll(Group group, std::vector<int64_t> features_per_rank,
                             Codecs codecs = std::nullopt);

  // local_embs: [N, D], one row per id received in the input dist, in the received KJT's order
  // (feature, source rank, sample, id). lengths: that KJT's lengths (features_per_rank[me] x
  // the received stride entries). input_splits[i] / output_splits[i]: ids this rank sent to /
  // received from rank i in the input dist (KJTAllToAllTensorsAwaitable's "values" splits).
  // unbucketize_permute_tensor: row-wise sharding's permutation, applied by the awaitable.
  // batch_size_per_rank with unequal entries (variable batch) needs sparse_features_recat; when
  // sparse_features_recat is given it is used (its inverse forward, itself backward) and the
  // segments are single samples; otherwise the module's feature-major -> rank-major recats.
  // Output [sum(input_splits), D]: the embeddings of this rank's pre-dist ids, in their order.
  SequenceEmbeddingsAwaitable forward(
      const Variable& local_embs, const Tensor& lengths, const std::vector<int64_t>& input_splits,
      const std::vector<int64_t>& output_splits,
      const std::optional<Tensor>& unbucketize_permute_tensor = std::nullopt,
      const std::optional<std::vector<int64_t>>& batch_size_per_rank = std::nullopt,
      const std::optional<Tensor>& sparse_features_recat = std::nullopt) const;
  SequenceEmbeddingsAwaitable operator()(
      const Variable& local_embs, const Tensor& lengths, const std::vector<int64_t>& input_splits,
      const std::vector<int64_t>& output_splits,
      const std::optional<Tensor>& unbucketize_permute_tensor = std::nullopt,
      const std::optional<std::vector<int64_t>>& batch_size_per_rank = std::nullopt,
      const std::optional<Tensor>& sparse_features_recat = std::nullopt) const {
    return forward(local_embs, lengths, input_splits, output_splits, unbucketize_permute_tensor,
                   batch_size_per_rank, sparse_features_recat);
  }

  const std::vector<int64_t>& features_per_rank() const { return features_per_rank_; }
  const Group& group() const { return group_; }

 private:
  Group group_;
  std::vector<int64_t> features_per_rank_;
  Codecs codecs_;
  Tensor forward_recat_, backward_recat_;
};

}  // namespace ferry::torchrec
