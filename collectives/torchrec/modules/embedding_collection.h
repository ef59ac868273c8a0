// ferry::torchrec::EmbeddingCollection: torchrec's unsharded EmbeddingCollection (per-id,
// "sequence" embeddings) on ferry's tape.
//
//   EmbeddingCollection ec({{.name = "t0", .num_embeddings = 10, .embedding_dim = 4,
//                            .feature_names = {"f0"}}}, /*seed=*/7);
//   SequenceEmbeddings out = ec.forward(kjt);
//   out.values("f0")   // Variable [n_ids of f0, 4]: row i = E[i-th id of f0] in KJT order
//   out["f0"]          // the same as a JaggedTensor (plain data) with f0's lengths
//
// All tables share one embedding_dim (torchrec raises otherwise). Every configured feature
// must be a key of the KJT; other keys are ignored; the KJT's weights are ignored (torchrec's
// EmbeddingCollection takes none). Gradients: sparse, per touched row, as
// sequence_embedding_lookup (embedding_lookup.h) gives them.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/torchrec/modules/embedding_config.h>
#include <ferry/collectives/torchrec/modules/embedding_module_base.h>
#include <ferry/collectives/torchrec/modules/embedding_table.h>
#include <ferry/collectives/torchrec/modules/fused_optimizer.h>
#include <ferry/collectives/torchrec/sparse/jagged_tensor.h>
#include <ferry/collectives/torchrec/sparse/keyed_jagged_tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ferry::torchrec {

// torchrec's Dict[str, JaggedTensor] output, with the values on the tape.
struct SequenceEmbeddings {
  std::vector<std::string> keys{};
  std::vector<Variable> values_per_key{};  // [n_ids of the key, D]
  std::vector<Tensor> lengths_per_key{};   // [B], the KJT's lengths of the key

  const Variable& values(const std::string& key) const;  // throws for an unknown key
  JaggedTensor operator[](const std::string& key) const;  // plain data
  std::map<std::string, JaggedTensor> to_dict() const;
};

class EmbeddingCollection : public EmbeddingModuleBase {
 public:
  EmbeddingCollection(std::vector<EmbeddingConfig> tables, uint64_t seed = 0,
                      std::optional<FusedOptimizerConfig> fused = std::nullopt);

  SequenceEmbeddings forward(const KeyedJaggedTensor& features) const;

  const std::vector<EmbeddingConfig>& embedding_configs() const { return configs_; }
  int64_t embedding_dim() const { return configs_.front().embedding_dim; }
  // Tables, parameters, optimizer and bounds settings, state dict ("embeddings.<table>.weight"):
  // EmbeddingModuleBase.

 private:
  std::vector<EmbeddingConfig> configs_;
};

}  // namespace ferry::torchrec
