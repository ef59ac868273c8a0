// ferry::torchrec::ShardedEmbeddingModule: a sharded module whose forward a train pipeline can
// split into stages (torchrec's ShardedEmbeddingModule: input_dist, compute_and_output_dist).
//
// A train pipeline finds these among DistributedModelParallel's sharded modules (as torchrec's
// finds every ShardedModule in the model) and runs each one's input dist for the next batch
// while the current batch computes. ShardedEbcModule and ShardedEcModule are ones; a module
// that is not (a plain ShardedModule) is only stepped by DistributedModelParallel and runs its
// forward inside the model's own step.
//
// The collective input check is split so that the pipeline carries every module's words on the
// one agreement it exchanges before each batch anyway: input_check_status (this rank's words,
// local), raise_input_check (the verdict over every rank's words: the same InvalidArgument on
// every rank), then input_dist_checked, which issues no check of its own.
//
// Each module keeps a batch's state between its stages in a context of its own kind (a bag
// collection's EmbeddingBagCollectionContext, a sequence one's EmbeddingCollectionContext), so
// a caller driving any set of modules asks each one for it (create_context, as torchrec's
// ShardedModule) and hands it back to the same module's stages.
#pragma once

#include <ferry/collectives/group.h>
#include <ferry/collectives/torchrec/comm/lazy_awaitable.h>
#include <ferry/collectives/torchrec/model_parallel/model_parallel.h>
#include <ferry/collectives/torchrec/modules/embedding_bag_collection.h>
#include <ferry/collectives/torchrec/modules/embedding_collection.h>
#include <ferry/collectives/torchrec/sharding/sharded_embedding_bag_collection.h>
#include <ferry/collectives/torchrec/sharding/sharded_input_check.h>

#include <cstdint>
#include <memory>
#include <variant>
#include <vector>

namespace ferry::torchrec {

// What one sharded embedding module gives for a batch: pooled embeddings (a bag collection) or
// per-id sequence embeddings (an embedding collection).
using EmbeddingModuleOutput = std::variant<PooledEmbeddings, SequenceEmbeddings>;

class ShardedEmbeddingModule : public ShardedModule {
 public:
  // The group of the module's collectives (its input check's words are in its rank order).
  virtual const Group& world() const = 0;
  // This rank's half of the input check of `features` (local; zeros when the check is off).
  virtual detail::InputCheckStatus input_check_status(const KeyedJaggedTensor& features) const = 0;
  // The verdict over every rank's words in world rank order (collective data, local call).
  virtual void raise_input_check(const std::vector<int64_t>& all_words,
                                 const detail::InputCheckStatus& mine) const = 0;
  // An empty context of this module's kind, for one batch.
  virtual std::unique_ptr<ShardedModuleContext> create_context() const = 0;
  // The input dist of an already checked batch: phase 1 issued at once (the outer wait finishes
  // it and issues phase 2, the inner one gives the module's per-sharding KJTs).
  // `ctx`: one create_context made (InvalidArgument for another module kind's).
  virtual ShardedInputDistAwaitable input_dist_checked(ShardedModuleContext& ctx,
                                                       const KeyedJaggedTensor& features) = 0;
  // The lookups, then the output dist started; the result waits for it on first use.
  virtual LazyAwaitable<EmbeddingModuleOutput> compute_and_output_dist(
      ShardedModuleContext& ctx, const std::vector<KeyedJaggedTensor>& dist_input) = 0;
};

}  // namespace ferry::torchrec
