// ferry::torchrec::EmbeddingBagCollection: torchrec's unsharded EmbeddingBagCollection
// (torchrec.modules.embedding_modules) on ferry's tape.
//
//   EmbeddingBagCollection ebc({{.name = "t0", .num_embeddings = 10, .embedding_dim = 4,
//                                .feature_names = {"f0", "f1"}}},
//                              /*is_weighted=*/false, /*seed=*/7);
//   PooledEmbeddings out = ebc.forward(kjt);     // out.values: Variable [B, 8]
//   KeyedTensor kt = out.keyed_tensor();         // keys {"f0", "f1"}, length_per_key {4, 4}
//
// forward: every configured feature must be a key of the KJT (InvalidArgument naming the
// missing feature and the KJT's keys); keys no table serves are ignored. The output's keys are
// the features in config order (table order, then each table's feature_names order), each
// with its table's dim, values [B, sum dims] in that order (one tape node for all tables).
// Pooling, weights and gradients are those of pooled_embedding_lookup (embedding_lookup.h):
// the tables' gradients are SparseRowGradients, applied by their fused optimizer or
// accumulated in EmbeddingTable::sparse_grad().
//
// Variable batch per feature (VBE): a KJT with stride_per_key_per_rank must carry
// inverse_indices; each feature is pooled over its own batch and the output is expanded to
// [B_out, sum dims] by the inverse indices, as torchrec does (vbe_pooling.h).
//
// is_weighted: the KJT's weights are the per-sample weights (constants), unless forward is
// given a `per_sample_weights` Variable (one element per KJT value, e.g. a leaf requiring grad
// that shares the KJT's weights), which then is differentiated. An unweighted collection
// ignores the KJT's weights, as torchrec does.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/torchrec/modules/embedding_config.h>
#include <ferry/collectives/torchrec/modules/embedding_module_base.h>
#include <ferry/collectives/torchrec/modules/embedding_table.h>
#include <ferry/collectives/torchrec/modules/fused_optimizer.h>
#include <ferry/collectives/torchrec/sparse/keyed_jagged_tensor.h>
#include <ferry/collectives/torchrec/sparse/keyed_tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ferry::torchrec {

// A KeyedTensor whose values are on the tape.
struct PooledEmbeddings {
  std::vector<std::string> keys{};
  std::vector<int64_t> length_per_key{};
  Variable values{};  // [B, sum(length_per_key)]
  KeyedTensor keyed_tensor() const;  // plain data (shares values' tensor)
};

class EmbeddingBagCollection : public EmbeddingModuleBase {
 public:
  // Validates the configs (validate_tables) and initialises every table from `seed`
  // (init_table_weight). With `fused`, every table gets that fused optimizer.
  EmbeddingBagCollection(std::vector<EmbeddingBagConfig> tables, bool is_weighted = false,
                         uint64_t seed = 0,
                         std::optional<FusedOptimizerConfig> fused = std::nullopt);

  PooledEmbeddings forward(const KeyedJaggedTensor& features,
                           const Variable& per_sample_weights = Variable()) const;

  const std::vector<EmbeddingBagConfig>& embedding_bag_configs() const { return configs_; }
  bool is_weighted() const { return is_weighted_; }
  // The output's dims, in the order of its keys (feature_names()).
  const std::vector<int64_t>& length_per_key() const { return dims_; }
  // Tables, parameters, optimizer and bounds settings, state dict ("embedding_bags.<table>.
  // weight"): EmbeddingModuleBase.

 private:
  std::vector<EmbeddingBagConfig> configs_;
  bool is_weighted_;
  std::vector<int64_t> dims_;
};

}  // namespace ferry::torchrec
