// What the train pipeline tests share whatever their model: its dense part (a small DLRM trained
// by SGD with momentum) and a rank's run into a batch the pipeline refuses.
#pragma once

#include <ferry/autograd/optimizer.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/torchrec.h>

#include <memory>
#include <string>
#include <vector>

namespace ferry::torchrec::testing {

// The DLRM over 13 dense features and pooled embeddings of `dim`.
inline DlrmConfig small_dlrm_config(int64_t dim) {
  DlrmConfig dc;
  dc.dense_in_features = 13;
  dc.dense_arch_layer_sizes = {16, dim};
  dc.over_arch_layer_sizes = {16, 1};
  dc.seed = 5;
  return dc;
}

// The dense parameters' optimizer.
inline std::unique_ptr<Optimizer> momentum_sgd(std::vector<Variable> p) {
  return std::make_unique<Sgd>(std::move(p), SgdOptions{.lr = 0.05, .momentum = 0.9});
}

// What one rank saw when its pipeline met a bad batch: the error, the steps trained before it,
// and an all_reduce of 1 after it (the group size when no rank left a collective behind).
struct RefusalSeen {
  std::string error;
  int64_t trained = 0;
  double after = -1;
};

inline RefusalSeen run_until_refused(TrainPipeline& pipeline, BatchSource& source,
                                     const Group& world) {
  RefusalSeen seen;
  try {
    while (pipeline.progress(source)) ++seen.trained;
  } catch (const InvalidArgument& e) {
    seen.error = e.what();
  }
  Tensor one = full({1}, 1.0, DType::Float64);
  all_reduce(one, world).wait();
  seen.after = one.item();
  return seen;
}

}  // namespace ferry::torchrec::testing
