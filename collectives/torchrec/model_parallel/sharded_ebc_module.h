// ferry::torchrec::ShardedEbcModule: a ShardedEmbeddingBagCollection as one of
// DistributedModelParallel's sharded modules.
#pragma once

#include <ferry/collectives/torchrec/model_parallel/model_parallel.h>
#include <ferry/collectives/torchrec/sharding/sharded_embedding_bag_collection.h>

#include <memory>
#include <string>
#include <vector>

namespace ferry::torchrec {

// A ShardedEmbeddingBagCollection as a DistributedModelParallel module. Its data_parallel tables
// receive sparse row gradients (no dense grad), so they are not handed to the dense reducer:
// fused_optimizer_step() averages and steps them (step_data_parallel, collective). The sharded
// tables' fused optimizers already ran in backward.
class ShardedEbcModule : public ShardedModule {
 public:
  explicit ShardedEbcModule(std::shared_ptr<ShardedEmbeddingBagCollection> ebc,
                            std::string name = "sparse.ebc");
  std::string name() const override { return name_; }
  std::vector<Variable> data_parallel_parameters() override { return {}; }
  void fused_optimizer_step() override;
  const std::shared_ptr<ShardedEmbeddingBagCollection>& ebc() const { return ebc_; }

 private:
  std::shared_ptr<ShardedEmbeddingBagCollection> ebc_;
  std::string name_;
};

}  // namespace ferry::torchrec
