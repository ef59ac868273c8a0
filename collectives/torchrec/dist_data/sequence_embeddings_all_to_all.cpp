#include <ferry/collectives/torchrec/dist_data/sequence_embeddings_all_to_all.h>

#include <ferry/collectives/torchrec/sparse/jagged_kernels.h>
#include <ferry/collectives/torchrec/utils/format.h>
#include <ferry/runtime/error.h>

#include <utility>

namespace ferry::torchrec {

using detail::list_str;

Tensor expand_into_jagged_permute(const std::vector<int64_t>& permute,
                                  const std::vector<int64_t>& input_segment_sizes) {
  constexpr const char* where = "expand_into_jagged_permute";
  const size_t n = input_segment_sizes.size();
  FERRY_CHECK(permute.size() == n, InvalidArgument, where, ": permute ", list_str(permute),
              " has ", permute.size(), " entries for ", n, " segments");
  std::vector<int64_t> start(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    FERRY_CHECK(input_segment_sizes[i] >= 0, InvalidArgument, where, ": segment sizes ",
                list_str(input_segment_sizes), " has a negative entry");
    start[i + 1] = start[i] + input_segment_sizes[i];
  }
  std::vector<bool> seen(n, false);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(start[n]));
  for (int64_t p : permute) {
    FERRY_CHECK(p >= 0 && static_cast<size_t>(p) < n && !seen[static_cast<size_t>(p)],
                InvalidArgument, where, ": permute ", list_str(permute),
                " is not a permutation of 0..", n - 1);
    seen[static_cast<size_t>(p)] = true;
    for (int64_t k = start[static_cast<size_t>(p)]; k < start[static_cast<size_t>(p) + 1]; ++k)
      out.push_back(k);
  }
  return from_vector(out);
}

Tensor sequence_sparse_features_recat(const KJTAllToAllTensorsAwaitable& input_dist) {
  const std::vector<int64_t>& strides = input_dist.stride_per_rank();
  FERRY_CHECK(!strides.empty(), InvalidArgument,
              "sequence_sparse_features_recat: the input dist had a variable stride per key "
              "(no stride_per_rank); not supported");
  if (!input_dist.recat()) return Tensor();
  const int64_t W = static_cast<int64_t>(strides.size());
  const int64_t T = static_cast<int64_t>(input_dist.keys().size());
  std::vector<int64_t> sizes;  // source-major segments (s, t)
  for (int64_t s = 0; s < W; ++s)
    for (int64_t t = 0; t < T; ++t) sizes.push_back(strides[static_cast<size_t>(s)]);
  return expand_into_jagged_permute(*input_dist.recat(), sizes);
}

SequenceEmbeddingsAllToAll::SequenceEmbeddingsAllToAll(Group group,
                                                       std::vector<int64_t> features_per_rank,
                                                       Codecs codecs)
    : group_(std::move(group)),
      features_per_rank_(std::move(features_per_rank)),
      codecs_(std::move(codecs)) {
  constexpr const char* where = "SequenceEmbeddingsAllToAll";
  detail::check_group(group_, where);
  FERRY_CHECK(static_cast<int>(features_per_rank_.size()) == group_.size(), InvalidArgument, where,
              ": features_per_rank ", list_str(features_per_rank_), " has ",
              features_per_rank_.size(), " entries for a group of ", group_.size(), " ranks");
  for (int64_t f : features_per_rank_)
    FERRY_CHECK(f >= 0, InvalidArgument, where, ": features_per_rank ",
                list_str(features_per_rank_), " has a negative entry");
  const int64_t T = features_per_rank_[static_cast<size_t>(group_.rank())];
  forward_recat_ = sequence_forward_recat(T, group_.size());
  backward_recat_ = sequence_backward_recat(T, group_.size());
}

SequenceEmbeddingsAwaitable SequenceEmbeddingsAllToAll::forward(
    const Variable& local_embs, const Tensor& lengths, const std::vector<int64_t>& input_splits,
    const std::vector<int64_t>& output_splits,
    const std::optional<Tensor>& unbucketize_permute_tensor,
    const std::optional<std::vector<int64_t>>& batch_size_per_rank,
    const std::optional<Tensor>& sparse_features_recat) const {
  const int W = group_.size(), me = group_.rank();
  FERRY_CHECK(local_embs.defined() && local_embs.value().dim() == 2, InvalidArgument,
              "SequenceEmbeddingsAllToAll.forward on rank ", me,
              ": local_embs must be a 2-D tensor [ids received, embedding_dim]");
  bool variable_batch = false;
  if (batch_size_per_rank) {
    FERRY_CHECK(static_cast<int>(batch_size_per_rank->size()) == W, InvalidArgument,
                "SequenceEmbeddingsAllToAll.forward on rank ", me, ": batch_size_per_rank ",
                list_str(*batch_size_per_rank), " has ", batch_size_per_rank->size(),
                " entries for ", W, " ranks");
    for (int64_t b : *batch_size_per_rank) variable_batch |= b != (*batch_size_per_rank)[0];
  }
  const bool have_sfr = sparse_features_recat && sparse_features_recat->defined();
  FERRY_CHECK(!variable_batch || have_sfr || features_per_rank_[static_cast<size_t>(me)] == 0,
              InvalidArgument, "SequenceEmbeddingsAllToAll.forward on rank ", me,
              ": batch_size_per_rank ", list_str(*batch_size_per_rank),
              " is not uniform, which needs sparse_features_recat (the input dist's per-sample "
              "recat: sequence_sparse_features_recat)");
  All2AllSequenceInfo info;
  info.embedding_dim = local_embs.value().size(1);
  info.lengths_after_sparse_data_all2all = lengths;
  info.input_splits = input_splits;
  info.output_splits = output_splits;
  if (have_sfr) {
    // The inverse of the per-sample recat: rank-major position -> feature-major position.
    const std::vector<int64_t> r = detail::index_vector(*sparse_features_recat);
    std::vector<int64_t> inv(r.size(), -1);
    for (size_t i = 0; i < r.size(); ++i) {
      FERRY_CHECK(r[i] >= 0 && static_cast<size_t>(r[i]) < r.size() &&
                      inv[static_cast<size_t>(r[i])] < 0,
                  InvalidArgument, "SequenceEmbeddingsAllToAll.forward on rank ", me,
                  ": sparse_features_recat ", list_str(r), " is not a permutation");
      inv[static_cast<size_t>(r[i])] = static_cast<int64_t>(i);
    }
    info.forward_recat_tensor = from_vector(inv);
    info.backward_recat_tensor = *sparse_features_recat;
    info.variable_batch_size = true;
  } else {
    info.forward_recat_tensor = forward_recat_;
    info.backward_recat_tensor = backward_recat_;
  }
  // alltoall_sequence checks the splits and lengths against the embeddings.
  return SequenceEmbeddingsAwaitable(alltoall_sequence(local_embs, info, group_, codecs_),
                                     unbucketize_permute_tensor, info.embedding_dim);
}

}  // namespace ferry::torchrec
