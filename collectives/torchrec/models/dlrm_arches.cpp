#include <ferry/collectives/torchrec/models/dlrm_arches.h>

#include <ferry/collectives/torchrec/models/dot_interaction.h>

#include <ferry/autograd/ops.h>
#include <ferry/runtime/error.h>

#include <utility>

namespace ferry::torchrec {

DenseArch::DenseArch(int64_t in_features, std::vector<int64_t> layer_sizes, uint64_t seed,
                     DType dtype)
    : mlp_(in_features, std::move(layer_sizes), seed, Mlp::Activation::ReluAll, dtype,
           "dense_arch") {}

Variable DenseArch::forward(const Variable& features) const { return mlp_.forward(features); }

InteractionArch::InteractionArch(int64_t num_sparse_features, int64_t embedding_dim)
    : f_(num_sparse_features), d_(embedding_dim) {
  FERRY_CHECK(f_ >= 1 && d_ >= 1, InvalidArgument, "InteractionArch: num_sparse_features and "
              "embedding_dim must be >= 1 (got ", f_, " and ", d_, ")");
  std::vector<int64_t> pairs;
  const int64_t n = f_ + 1;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i + 1; j < n; ++j) pairs.push_back(i * n + j);
  }
  pairs_ = from_vector<int64_t>(pairs);
}

Variable InteractionArch::forward(const Variable& dense_out, const Variable& sparse) const {
  FERRY_CHECK(dense_out.defined() && sparse.defined(), InvalidArgument,
              "InteractionArch: dense_out and sparse must be defined");
  const bool fits = dense_out.dim() == 2 && dense_out.size(1) == d_ && sparse.dim() == 2 &&
                    sparse.size(1) == f_ * d_ && sparse.size(0) == dense_out.size(0);
  FERRY_CHECK(fits, InvalidArgument, "InteractionArch: expected dense_out [B, ", d_,
              "] and sparse [B, ", f_ * d_, "] (", f_, " features of dim ", d_, ") but got ",
              shape_str(dense_out.shape()), " and ", shape_str(sparse.shape()));
  return dot_interaction(dense_out, sparse, f_);
}

OverArch::OverArch(int64_t in_features, std::vector<int64_t> layer_sizes, uint64_t seed,
                   DType dtype)
    : mlp_(in_features, layer_sizes, seed, Mlp::Activation::ReluButLast, dtype, "over_arch") {
  FERRY_CHECK(!layer_sizes.empty() && layer_sizes.back() == 1, InvalidArgument,
              "OverArch: the last layer size must be 1 (one logit per sample)");
}

Variable OverArch::forward(const Variable& interaction) const {
  return mlp_.forward(interaction);
}

}  // namespace ferry::torchrec
