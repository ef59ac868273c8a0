#include <ferry/collectives/torchrec/model_parallel/sharded_ebc_module.h>

#include <ferry/runtime/error.h>

namespace ferry::torchrec {

ShardedEbcModule::ShardedEbcModule(std::shared_ptr<ShardedEmbeddingBagCollection> ebc,
                                   std::string name)
    : ebc_(std::move(ebc)), name_(std::move(name)) {
  FERRY_CHECK(ebc_ != nullptr, InvalidArgument, "ShardedEbcModule: the collection is null");
}

void ShardedEbcModule::fused_optimizer_step() {
  if (!ebc_->data_parallel_tables().empty()) ebc_->step_data_parallel();
}

}  // namespace ferry::torchrec
