// ferry::torchrec::DLRM: torchrec.models.dlrm's model with the sparse arch as a pluggable
// component.
//
//   SparseArch sparse({"f0", "f1"}, /*embedding_dim=*/8,
//                     [&](const KeyedJaggedTensor& kjt) { return ebc.forward(kjt); });
//   DLRM model(sparse, {.dense_in_features = 13, .dense_arch_layer_sizes = {32, 8},
//                       .over_arch_layer_sizes = {16, 1}, .seed = 1});
//   Variable logits = model.forward(dense, kjt);   // [B]
//   Variable loss = bce_with_logits(logits, labels);
//
// SparseArch: anything that maps a KJT to the F pooled embeddings on the tape, [B, F*D] with
// feature f in columns [f*D, (f+1)*D) in `feature_names` order. The callable may return
//   - a Variable [B, F*D], or
//   - any type with members `keys`, `length_per_key` and `values` (a Variable) — a KeyedTensor
//     whose values are on the tape, e.g. the unsharded EmbeddingBagCollection's pooled output,
//     and later the sharded collection's (through the model-parallel wrapper); the keys must be
//     `feature_names` in order and every length D (checked at each call).
// The sparse arch owns its parameters (embedding tables with their fused optimizers); the DLRM
// exposes only the dense ones.
//
// DLRM::forward = over_arch(interaction(dense_arch(dense), sparse_arch(kjt))), reshaped to [B].
// forward_with_embeddings takes the pooled embeddings already computed (a pipeline that waits
// on an output dist itself calls this). Parameters are seeded from config.seed: the dense arch
// from seed * 2 + 1, the over arch from seed * 2 + 2.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/torchrec/models/dlrm_arches.h>
#include <ferry/collectives/torchrec/sparse/keyed_jagged_tensor.h>
#include <ferry/collectives/torchrec/sparse/keyed_tensor.h>
#include <ferry/runtime/error.h>

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace ferry::torchrec {

// The sparse arch's output: a KeyedTensor whose values are a Variable.
struct SparseArchOutput {
  std::vector<std::string> keys{};
  std::vector<int64_t> length_per_key{};
  Variable values{};  // [B, sum(length_per_key)]
  KeyedTensor keyed_tensor() const;  // plain data (shares values' tensor)
};

class SparseArch {
 public:
  template <class Fn>
  SparseArch(std::vector<std::string> feature_names, int64_t embedding_dim, Fn fn)
      : features_(std::move(feature_names)), dim_(embedding_dim) {
    check_config();
    using Result = std::invoke_result_t<Fn&, const KeyedJaggedTensor&>;
    if constexpr (std::is_same_v<std::decay_t<Result>, Variable>) {
      fn_ = [fn = std::move(fn), keys = features_,
             dims = std::vector<int64_t>(features_.size(), dim_)](
                const KeyedJaggedTensor& kjt) mutable {
        return SparseArchOutput{keys, dims, fn(kjt)};
      };
    } else {
      fn_ = [fn = std::move(fn)](const KeyedJaggedTensor& kjt) mutable {
        auto out = fn(kjt);
        return SparseArchOutput{std::vector<std::string>(out.keys.begin(), out.keys.end()),
                                std::vector<int64_t>(out.length_per_key.begin(),
                                                     out.length_per_key.end()),
                                Variable(out.values)};
      };
    }
  }
  // Calls the component and checks its output: keys == feature_names, every length D,
  // values [kjt.stride(), F*D]. InvalidArgument naming what differs.
  SparseArchOutput forward(const KeyedJaggedTensor& features) const;

  const std::vector<std::string>& feature_names() const { return features_; }
  int64_t embedding_dim() const { return dim_; }
  int64_t num_features() const { return static_cast<int64_t>(features_.size()); }

 private:
  void check_config() const;
  std::vector<std::string> features_;
  int64_t dim_ = 0;
  mutable std::function<SparseArchOutput(const KeyedJaggedTensor&)> fn_;
};

struct DlrmConfig {
  int64_t dense_in_features = 13;
  std::vector<int64_t> dense_arch_layer_sizes{};  // last = the sparse arch's embedding_dim
  std::vector<int64_t> over_arch_layer_sizes{};   // last = 1
  uint64_t seed = 0;
  DType dtype = DType::Float32;
};

class DLRM {
 public:
  // `sparse_arch` is referenced, not copied: it must outlive the model.
  DLRM(const SparseArch& sparse_arch, const DlrmConfig& config);

  // dense [B, dense_in_features], features a KJT with stride B -> logits [B].
  Variable forward(const Variable& dense, const KeyedJaggedTensor& features) const;
  Variable forward_with_embeddings(const Variable& dense, const SparseArchOutput& pooled) const;

  const SparseArch& sparse_arch() const { return *sparse_; }
  const DenseArch& dense_arch() const { return dense_; }
  const InteractionArch& inter_arch() const { return inter_; }
  const OverArch& over_arch() const { return over_; }
  // The dense arch's then the over arch's weight and bias per layer: what a dense optimizer
  // steps and what data-parallel training averages (the embeddings are the sparse arch's).
  std::vector<Variable> dense_parameters() const;

 private:
  const SparseArch* sparse_;
  DenseArch dense_;
  InteractionArch inter_;
  OverArch over_;
};

// The mean over the batch of the logistic loss of logits x against labels t in [0, 1]:
// max(x, 0) - x t + log(1 + exp(-|x|)) (stable for any |x|). logits and labels [B] (or equal
// shapes); labels are constants. InvalidArgument when the shapes differ.
Variable bce_with_logits(const Variable& logits, const Tensor& labels);

}  // namespace ferry::torchrec
