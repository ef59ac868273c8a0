// ferry::torchrec::ShardedEbcModule / ShardedEcModule: a ShardedEmbeddingBagCollection or a
// ShardedEmbeddingCollection as one of DistributedModelParallel's sharded modules.
//
// Their data_parallel tables receive sparse row gradients (no dense grad), so they are not
// handed to the dense reducer: fused_optimizer_step() averages and steps them
// (step_data_parallel, collective). The sharded tables' fused optimizers already ran in
// backward. As ShardedEmbeddingModules they hand their collection's stages to a train
// pipeline.
#pragma once

#include <ferry/collectives/torchrec/model_parallel/model_parallel.h>
#include <ferry/collectives/torchrec/model_parallel/sharded_embedding_module.h>
#include <ferry/collectives/torchrec/sharding/sharded_embedding_bag_collection.h>
#include <ferry/collectives/torchrec/sharding/sharded_embedding_collection.h>
#include <ferry/runtime/error.h>

#include <functional>

#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace ferry::torchrec {

template <class Collection>
class ShardedCollectionModule : public ShardedEmbeddingModule {
 public:
  // name: the module path ("sparse.ebc" for a bag collection, "sparse.ec" for a sequence one by
  // default). Throws InvalidArgument for a null collection.
  explicit ShardedCollectionModule(std::shared_ptr<Collection> collection,
                                   std::string name = kDefaultName)
      : collection_(std::move(collection)), name_(std::move(name)) {
    FERRY_CHECK(collection_ != nullptr, InvalidArgument, "ShardedModule \"", name_,
                "\": the collection is null");
  }
  std::string name() const override { return name_; }
  std::vector<Variable> data_parallel_parameters() override { return {}; }
  void fused_optimizer_step() override {
    if (collection_->has_data_parallel_tables()) collection_->step_data_parallel();
  }
  const std::shared_ptr<Collection>& collection() const { return collection_; }

  const Group& world() const override { return collection_->world(); }
  detail::InputCheckStatus input_check_status(const KeyedJaggedTensor& features) const override {
    return collection_->input_check_status(features);
  }
  void raise_input_check(const std::vector<int64_t>& all_words,
                         const detail::InputCheckStatus& mine) const override {
    collection_->raise_input_check(all_words, mine);
  }
  std::unique_ptr<ShardedModuleContext> create_context() const override {
    return collection_->create_context();
  }
  ShardedInputDistAwaitable input_dist_checked(ShardedModuleContext& ctx,
                                               const KeyedJaggedTensor& features) override {
    return collection_->input_dist_checked(own_context(ctx, "input_dist_checked"), features);
  }
  LazyAwaitable<EmbeddingModuleOutput> compute_and_output_dist(
      ShardedModuleContext& ctx, const std::vector<KeyedJaggedTensor>& dist_input) override {
    // The collection's own LazyAwaitable runs its callbacks on first use; this one only
    // converts its value, moved out: this closure holds the only handle to it, and the outer
    // awaitable caches what it returns (a copy was a list of keys and of dims per step). Only
    // a wait whose callbacks threw after the move could run it twice: that one raises.
    auto inner = collection_->compute_and_output_dist(
        own_context(ctx, "compute_and_output_dist"), dist_input);
    return LazyAwaitable<EmbeddingModuleOutput>([inner, taken = false]() mutable {
      FERRY_CHECK(!taken, InvalidArgument, "compute_and_output_dist: the embeddings were "
                  "handed to an earlier wait whose callbacks failed");
      EmbeddingModuleOutput out(inner.take());
      taken = true;
      return out;
    });
  }

 private:
  using Context = typename Collection::Context;
  static constexpr const char* kDefaultName =
      std::is_same_v<Collection, ShardedEmbeddingBagCollection> ? "sparse.ebc" : "sparse.ec";
  std::shared_ptr<Collection> collection_;
  std::string name_;

  // The collection's own kind of `ctx`; the message names this module and the stage.
  Context& own_context(ShardedModuleContext& ctx, const char* stage) const {
    Context* c = dynamic_cast<Context*>(&ctx);
    FERRY_CHECK(c != nullptr, InvalidArgument, "ShardedModule \"", name_, "\"::", stage,
                ": the batch's context is another kind of module's (pass the one this module's "
                "create_context made)");
    return *c;
  }
};

using ShardedEbcModule = ShardedCollectionModule<ShardedEmbeddingBagCollection>;
using ShardedEcModule = ShardedCollectionModule<ShardedEmbeddingCollection>;

}  // namespace ferry::torchrec
