// SparseOutputs: the pipelined modules' outputs of one batch, looked up by name or by kind for
// the dense step. Each is the module's LazyAwaitable, already waited by the pipeline: a use
// returns its cached value, no copy.
#include <ferry/collectives/torchrec/train_pipeline/train_pipeline.h>

#include <ferry/runtime/error.h>

#include <variant>

namespace ferry::torchrec {

namespace {

std::string listed(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "\"" : ", \"") + n + "\"";
  return out.empty() ? "none" : out;
}

// The output of `module`, or (module empty) the only output holding a T.
template <class T>
const T& of_kind(const SparseOutputs& s, const std::string& module, const char* what) {
  if (!module.empty()) {
    const EmbeddingModuleOutput& out = s.at(module);
    FERRY_CHECK(std::holds_alternative<T>(out), InvalidArgument, "SparseOutputs::", what,
                ": module \"", module, "\" gives ",
                std::holds_alternative<PooledEmbeddings>(out) ? "pooled" : "sequence",
                " embeddings");
    return std::get<T>(out);
  }
  const T* found = nullptr;
  size_t count = 0;
  for (size_t m = 0; m < s.outputs.size(); ++m) {
    const EmbeddingModuleOutput& out = s.at(s.modules[m]);
    if (!std::holds_alternative<T>(out)) continue;
    found = &std::get<T>(out);
    ++count;
  }
  if (count == 1) return *found;
  std::vector<std::string> of_this_kind;
  for (size_t m = 0; m < s.outputs.size(); ++m)
    if (std::holds_alternative<T>(s.at(s.modules[m]))) of_this_kind.push_back(s.modules[m]);
  FERRY_CHECK(of_this_kind.size() == 1, InvalidArgument, "SparseOutputs::", what,
              "(): expected exactly one such module when no name is given, found ",
              of_this_kind.size(), " (", listed(of_this_kind), "; all modules: ",
              listed(s.modules), ")");
  return *found;
}

}  // namespace

const EmbeddingModuleOutput& SparseOutputs::at(const std::string& module) const {
  for (size_t m = 0; m < modules.size() && m < outputs.size(); ++m) {
    if (modules[m] != module) continue;
    // A copy of the handle shares the cache: the reference stays valid while `outputs` holds it.
    LazyAwaitable<EmbeddingModuleOutput> handle = outputs[m];
    return handle.value();
  }
  FERRY_THROW(InvalidArgument, "SparseOutputs::at: no pipelined module \"", module,
              "\" (modules: ", listed(modules), ")");
}

const PooledEmbeddings& SparseOutputs::pooled(const std::string& module) const {
  return of_kind<PooledEmbeddings>(*this, module, "pooled");
}

const SequenceEmbeddings& SparseOutputs::sequence(const std::string& module) const {
  return of_kind<SequenceEmbeddings>(*this, module, "sequence");
}

}  // namespace ferry::torchrec
