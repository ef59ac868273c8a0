#include <ferry/collectives/torchrec/model_parallel/sharded_ec_module.h>

#include <ferry/runtime/error.h>

namespace ferry::torchrec {

ShardedEcModule::ShardedEcModule(std::shared_ptr<ShardedEmbeddingCollection> ec, std::string name)
    : ec_(std::move(ec)), name_(std::move(name)) {
  FERRY_CHECK(ec_ != nullptr, InvalidArgument, "ShardedEcModule: the collection is null");
}

void ShardedEcModule::fused_optimizer_step() {
  if (!ec_->data_parallel_tables().empty()) ec_->step_data_parallel();
}

}  // namespace ferry::torchrec
