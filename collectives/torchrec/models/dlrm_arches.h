// The dense parts of DLRM (torchrec.models.dlrm's shape):
//
//   DenseArch        MLP on the dense features, [B, in] -> [B, D], ReLU after every layer.
//   InteractionArch  dot products between the dense output and the F pooled embeddings:
//                    X = stack(dense_out, sparse_1..F) [B, F+1, D]; Z = X Xᵀ [B, F+1, F+1];
//                    the strictly upper-triangular entries Z[i, j], i < j, in row-major order
//                    (i = 0 first: (0,1), (0,2), ..., (0,F), (1,2), ...) -> [B, F(F+1)/2];
//                    output cat(dense_out, those) [B, D + F(F+1)/2].
//   OverArch         MLP -> one logit per sample, ReLU between layers, none after the last.
//
// The MLPs are fused linear layers (ferry::linear: GEMM, bias and ReLU in one node each), the
// interaction one dot_interaction node (dot_interaction.h), so the whole dense path is on the
// tape in a handful of nodes: gradients reach the dense features, the pooled embeddings (and
// through them the sparse arch) and every Linear.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/torchrec/models/mlp.h>
#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <vector>

namespace ferry::torchrec {

class DenseArch {
 public:
  // layer_sizes.back() is D, the embedding dim the interaction expects.
  DenseArch(int64_t in_features, std::vector<int64_t> layer_sizes, uint64_t seed,
            DType dtype = DType::Float32);
  Variable forward(const Variable& features) const;  // [B, in] -> [B, D]
  int64_t in_features() const { return mlp_.in_features(); }
  int64_t out_features() const { return mlp_.out_features(); }
  std::vector<Variable> parameters() const { return mlp_.parameters(); }
  const Mlp& mlp() const { return mlp_; }

 private:
  Mlp mlp_;
};

class InteractionArch {
 public:
  // F sparse features (>= 1) of dim D each (>= 1).
  InteractionArch(int64_t num_sparse_features, int64_t embedding_dim);

  // dense_out [B, D], sparse [B, F*D] (feature f in columns [f*D, (f+1)*D)) ->
  // [B, D + F(F+1)/2]. InvalidArgument naming the shapes when they do not fit.
  Variable forward(const Variable& dense_out, const Variable& sparse) const;

  int64_t num_sparse_features() const { return f_; }
  int64_t embedding_dim() const { return d_; }
  int64_t out_features() const { return d_ + f_ * (f_ + 1) / 2; }
  // The flat indices i * (F+1) + j of the kept pairs, in output order (int64, [F(F+1)/2]).
  const Tensor& pair_indices() const { return pairs_; }

 private:
  int64_t f_ = 0;
  int64_t d_ = 0;
  Tensor pairs_;
};

class OverArch {
 public:
  // layer_sizes.back() must be 1 (the logit).
  OverArch(int64_t in_features, std::vector<int64_t> layer_sizes, uint64_t seed,
           DType dtype = DType::Float32);
  Variable forward(const Variable& interaction) const;  // [B, in] -> [B, 1]
  int64_t in_features() const { return mlp_.in_features(); }
  std::vector<Variable> parameters() const { return mlp_.parameters(); }
  const Mlp& mlp() const { return mlp_; }

 private:
  Mlp mlp_;
};

}  // namespace ferry::torchrec
