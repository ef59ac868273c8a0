#include <ferry/collectives/torchrec/modules/embedding_module_base.h>

#include <ferry/collectives/torchrec/modules/module_helpers.h>
#include <ferry/runtime/error.h>

namespace ferry::torchrec {

EmbeddingModuleBase::EmbeddingModuleBase(const std::vector<EmbeddingBagConfig>& configs,
                                         uint64_t seed,
                                         const std::optional<FusedOptimizerConfig>& fused,
                                         const char* name, const char* state_prefix)
    : name_(name), prefix_(state_prefix) {
  for (const auto& c : configs) {
    auto t = std::make_shared<EmbeddingTable>(c.name, init_table_weight(c, seed));
    if (fused) t->set_fused_optimizer(*fused);
    tables_.push_back(t);
    for (const auto& f : c.feature_names) features_.push_back(f);
  }
}

const std::shared_ptr<EmbeddingTable>& EmbeddingModuleBase::table(const std::string& name) const {
  for (const auto& t : tables_)
    if (t->name() == name) return t;
  std::vector<std::string> names;
  for (const auto& t : tables_) names.push_back(t->name());
  FERRY_THROW(InvalidArgument, name_, ": no table \"", name, "\" in ",
              detail::keys_str(names, detail::kEveryEntry));
}

std::vector<Variable> EmbeddingModuleBase::parameters() const {
  std::vector<Variable> out;
  for (const auto& t : tables_) out.push_back(t->weight());
  return out;
}

void EmbeddingModuleBase::set_fused_optimizer(const FusedOptimizerConfig& config) {
  for (auto& t : tables_) t->set_fused_optimizer(config);
}

void EmbeddingModuleBase::set_bounds_check_mode(BoundsCheckMode mode) {
  for (auto& t : tables_) t->set_bounds_check_mode(mode);
}

std::map<std::string, Tensor> EmbeddingModuleBase::state_dict() const {
  std::map<std::string, Tensor> out;
  for (const auto& t : tables_) out[prefix_ + "." + t->name() + ".weight"] = t->weight().value();
  return out;
}

void EmbeddingModuleBase::load_state_dict(const std::map<std::string, Tensor>& state) {
  detail::load_table_weights((name_ + "::load_state_dict").c_str(), prefix_.c_str(), tables_,
                             state);
}

}  // namespace ferry::torchrec
