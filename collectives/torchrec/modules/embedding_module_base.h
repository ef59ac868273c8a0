// ferry::torchrec::EmbeddingModuleBase: what EmbeddingBagCollection and EmbeddingCollection
// share -- their tables, made from the configs and a seed, with the features they serve, the
// optimizer and bounds settings of every table, and the state dict under torchrec's names.
// Each collection adds its forward.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/torchrec/modules/embedding_config.h>
#include <ferry/collectives/torchrec/modules/embedding_table.h>
#include <ferry/collectives/torchrec/modules/fused_optimizer.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ferry::torchrec {

class EmbeddingModuleBase {
 public:
  // The features in config order (table order, then each table's feature_names order).
  const std::vector<std::string>& feature_names() const { return features_; }
  // By config order, or by name (throws InvalidArgument naming the tables).
  const std::vector<std::shared_ptr<EmbeddingTable>>& tables() const { return tables_; }
  const std::shared_ptr<EmbeddingTable>& table(const std::string& name) const;
  // Every table's weight Variable (they receive no dense gradient; see EmbeddingTable).
  std::vector<Variable> parameters() const;
  void set_fused_optimizer(const FusedOptimizerConfig& config);
  void set_bounds_check_mode(BoundsCheckMode mode);

  // torchrec's names: "<prefix>.<table>.weight" -> the table (shared, not copied), the prefix
  // "embedding_bags" or "embeddings".
  std::map<std::string, Tensor> state_dict() const;
  // Copies the tensors of a state_dict in (every table must be present with its shape).
  void load_state_dict(const std::map<std::string, Tensor>& state);

 protected:
  // One table per config (already validated by the collection), initialised from `seed`
  // (init_table_weight), with the fused optimizer when given. `name` names the collection in
  // messages, `state_prefix` its state keys.
  EmbeddingModuleBase(const std::vector<EmbeddingBagConfig>& configs, uint64_t seed,
                      const std::optional<FusedOptimizerConfig>& fused, const char* name,
                      const char* state_prefix);
  ~EmbeddingModuleBase() = default;

 private:
  std::string name_, prefix_;
  std::vector<std::shared_ptr<EmbeddingTable>> tables_;
  std::vector<std::string> features_;
};

}  // namespace ferry::torchrec
