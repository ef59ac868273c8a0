#include <ferry/collectives/torchrec/models/dlrm.h>

#include <ferry/autograd/ops.h>
#include <ferry/collectives/torchrec/utils/format.h>

namespace ferry::torchrec {

KeyedTensor SparseArchOutput::keyed_tensor() const {
  return KeyedTensor(keys, length_per_key, values.value());
}

void SparseArch::check_config() const {
  FERRY_CHECK(!features_.empty() && dim_ >= 1, InvalidArgument,
              "SparseArch: needs at least one feature and an embedding_dim >= 1 (got ",
              features_.size(), " features, dim ", dim_, ")");
}

SparseArchOutput SparseArch::forward(const KeyedJaggedTensor& features) const {
  SparseArchOutput out = fn_(features);
  FERRY_CHECK(out.keys == features_, InvalidArgument, "SparseArch: the component returned keys ",
              detail::keys_str(out.keys, detail::kEveryEntry), " but the model expects ",
              detail::keys_str(features_, detail::kEveryEntry));
  for (size_t k = 0; k < out.length_per_key.size(); ++k) {
    FERRY_CHECK(out.length_per_key[k] == dim_, InvalidArgument, "SparseArch: feature '",
                features_[k], "' has dim ", out.length_per_key[k], " but the model expects ",
                dim_);
  }
  const int64_t width = num_features() * dim_;
  FERRY_CHECK(out.values.defined() && out.values.dim() == 2 &&
                  out.values.size(0) == features.stride() && out.values.size(1) == width,
              InvalidArgument, "SparseArch: expected pooled values [", features.stride(), ", ",
              width, "] (KJT stride x F*D) but got ",
              out.values.defined() ? shape_str(out.values.shape()) : std::string("undefined"));
  return out;
}

DLRM::DLRM(const SparseArch& sparse_arch, const DlrmConfig& config)
    : sparse_(&sparse_arch),
      dense_(config.dense_in_features, config.dense_arch_layer_sizes, config.seed * 2 + 1,
             config.dtype),
      inter_(sparse_arch.num_features(), sparse_arch.embedding_dim()),
      over_(inter_.out_features(), config.over_arch_layer_sizes, config.seed * 2 + 2,
            config.dtype) {
  FERRY_CHECK(dense_.out_features() == sparse_arch.embedding_dim(), InvalidArgument,
              "DLRM: the dense arch's last layer size (", dense_.out_features(),
              ") must equal the sparse arch's embedding_dim (", sparse_arch.embedding_dim(),
              ")");
}

Variable DLRM::forward(const Variable& dense, const KeyedJaggedTensor& features) const {
  FERRY_CHECK(dense.defined() && dense.dim() == 2 && dense.size(0) == features.stride(),
              InvalidArgument, "DLRM: dense features ",
              dense.defined() ? shape_str(dense.shape()) : std::string("undefined"),
              " do not match the KJT's batch (stride ", features.stride(), ")");
  return forward_with_embeddings(dense, sparse_->forward(features));
}

Variable DLRM::forward_with_embeddings(const Variable& dense,
                                       const SparseArchOutput& pooled) const {
  Variable dense_out = dense_.forward(dense);
  Variable logits = over_.forward(inter_.forward(dense_out, pooled.values));
  return reshape(logits, {-1});
}

std::vector<Variable> DLRM::dense_parameters() const {
  std::vector<Variable> out = dense_.parameters();
  for (const Variable& p : over_.parameters()) out.push_back(p);
  return out;
}

Variable bce_with_logits(const Variable& logits, const Tensor& labels) {
  FERRY_CHECK(logits.defined() && labels.defined() && logits.shape() == labels.shape(),
              InvalidArgument, "bce_with_logits: logits ",
              logits.defined() ? shape_str(logits.shape()) : std::string("undefined"),
              " and labels ", labels.defined() ? shape_str(labels.shape()) : std::string("undefined"),
              " must have equal shapes");
  // to() always copies: the labels are used as they are when their dtype already fits.
  const Tensor target = labels.dtype() == logits.dtype() ? labels : labels.to(logits.dtype());
  return binary_cross_entropy_with_logits(logits, Variable(target), Reduction::Mean);
}

}  // namespace ferry::torchrec
