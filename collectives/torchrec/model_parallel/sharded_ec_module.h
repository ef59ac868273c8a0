// ferry::torchrec::ShardedEcModule: a ShardedEmbeddingCollection (sequence embeddings) as one of
// DistributedModelParallel's sharded modules.
#pragma once

#include <ferry/collectives/torchrec/model_parallel/model_parallel.h>
#include <ferry/collectives/torchrec/sharding/sharded_embedding_collection.h>

#include <memory>
#include <string>
#include <vector>

namespace ferry::torchrec {

// As ShardedEbcModule: the data_parallel tables receive sparse row gradients (no dense grad), so
// they are not handed to the dense reducer; fused_optimizer_step() averages and steps them
// (step_data_parallel, collective). The sharded tables' fused optimizers already ran in backward.
class ShardedEcModule : public ShardedModule {
 public:
  explicit ShardedEcModule(std::shared_ptr<ShardedEmbeddingCollection> ec,
                           std::string name = "sparse.ec");
  std::string name() const override { return name_; }
  std::vector<Variable> data_parallel_parameters() override { return {}; }
  void fused_optimizer_step() override;
  const std::shared_ptr<ShardedEmbeddingCollection>& ec() const { return ec_; }

 private:
  std::shared_ptr<ShardedEmbeddingCollection> ec_;
  std::string name_;
};

}  // namespace ferry::torchrec
