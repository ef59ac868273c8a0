// ferry::torchrec train pipelines: one training step per progress() call over a model whose sparse
// part is a ShardedEmbeddingBagCollection and whose dense part is replicated and stepped by a
// DistributedModelParallel.
//
//   PipelineModel model{.sparse = sebc, .dmp = &dmp,
//                       .dense_step = [&](const Batch& b, const PooledEmbeddings& pooled) {
//                         Variable logits = dlrm.forward_with_embeddings(Variable(b.dense), ...);
//                         return DenseStepResult{logits, bce_with_logits(logits, b.labels)};
//                       }};
//   TrainPipelineSparseDist pipeline(model);
//   while (std::optional<TrainStepOutput> out = pipeline.progress(source)) { ... }
//   pipeline.reset();   // next epoch (after source.reset())
//
// One step, per rank: sparse input dist (both KJT all-to-all phases) -> lookup and output dist
// -> dense forward and loss -> backward (the fused sparse optimizers update the touched rows
// inside it; the reducer launches the dense gradients' all_reduces) -> the reducer's finish ->
// the dense optimizer -> every sharded module's fused_optimizer_step (data_parallel tables) ->
// zero_grad. TrainPipelineBase runs exactly that, batch after batch. TrainPipelineSparseDist
// starts batch i+1's input dist right after batch i's input dist completed (and before batch
// i's lookup), so it travels while batch i computes; phase 2 of it is issued once batch i's
// output dist is in hand, and it is waited after batch i's optimizer step. The input dist reads
// only ids (never the tables), so the model computations and parameter updates of every rank are
// the base pipeline's, in the same order: the two give bit-identical models.
//
// Exhaustion agreement (unlike torchrec, where a rank whose data ended leaves its peers blocked
// in the next input dist until the collective timeout): before a batch's input dist is started,
// every rank contributes "I have a batch" to an all_gather over the world, together with its
// half of the collection's collective input check on that batch (so a bad batch raises the same
// InvalidArgument on every rank, before any of its payload moves, without an exchange of its
// own: see ShardedEmbeddingBagCollection::input_check_status). If any rank has no batch, no
// rank starts that input dist: the batches already in flight are drained
// (their steps run on every rank) and then progress() returns std::nullopt on every rank, after
// the same step. A rank with more batches than its peers leaves its extra batches untrained
// (like the samplers' even_batches). So ranks with uneven data end together, cleanly, with
// matched collectives. TrainPipelineSparseDist fetches each batch one step early and launches
// its agreement then, so the agreement travels during a step's compute instead of being a
// synchronisation point of its own.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/torchrec/datasets/batch.h>
#include <ferry/collectives/torchrec/model_parallel/model_parallel.h>
#include <ferry/collectives/torchrec/model_parallel/sharded_collection_module.h>
#include <ferry/collectives/torchrec/sharding/sharded_embedding_bag_collection.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ferry::torchrec {

// What the dense part of a step returns: the logits [B] and the loss (a scalar on the tape,
// this rank's mean over its batch).
struct DenseStepResult {
  Variable logits;
  Variable loss;
};

struct PipelineModel {
  std::shared_ptr<ShardedEmbeddingBagCollection> sparse;
  // Steps the replicated parameters and every sharded module (must include `sparse`'s
  // data_parallel step, e.g. through a ShardedEbcModule).
  DistributedModelParallel* dmp = nullptr;
  // The dense forward and loss of one batch given its pooled embeddings (on the tape).
  std::function<DenseStepResult(const Batch&, const PooledEmbeddings&)> dense_step;
};

// Wall-clock seconds of one step on this rank, by stage. In the sparse-dist pipeline,
// input_dist is the time this step spent starting and waiting on the *next* batch's input dist
// (the part not hidden behind compute); `comm_wait` is the time blocked in waits on
// collectives: input dist waits, the output dist's wait (with the lookup, which the
// LazyAwaitable runs together with it, so an upper bound), the reducer's finish, the sharded
// modules' optimizer step (the data_parallel tables' all_reduce with their small step: an
// upper bound too) and the exhaustion agreement (which also absorbs the skew between ranks).
struct StepTimes {
  double data = 0;                // fetching / generating this rank's batch
  double agreement = 0;           // the "have a batch" agreement(s), with the input check
  double input_dist = 0;          // starting + waiting the input dist (both phases)
  double lookup_output_dist = 0;  // compute_and_output_dist + its wait
  double dense_forward = 0;       // dense forward and loss
  double backward = 0;            // backward (fused sparse updates, gradient launches inside)
  double grad_all_reduce = 0;     // the reducer's finish(): waiting for the gradient all_reduces
  double optimizer = 0;           // dense optimizer + zero_grad
  double sparse_optimizer = 0;    // every module's fused_optimizer_step: for a ShardedEbcModule
                                  // the data_parallel tables' gradient all_reduce and step
  double comm_wait = 0;
  double total = 0;
};

struct TrainStepOutput {
  int64_t step = 0;  // 0-based, counted since construction / reset()
  Tensor logits;     // [B] (detached)
  Tensor labels;     // [B]
  double loss = 0;   // this rank's mean loss on its batch
  StepTimes times;
};

class TrainPipeline {
 public:
  explicit TrainPipeline(PipelineModel model);
  virtual ~TrainPipeline() = default;
  TrainPipeline(const TrainPipeline&) = delete;
  TrainPipeline& operator=(const TrainPipeline&) = delete;

  // One training step on the next batch of `source`; std::nullopt (on every rank, after the
  // same step) once any rank's source is exhausted and the pipeline is drained. Collective.
  virtual std::optional<TrainStepOutput> progress(BatchSource& source) = 0;
  // progress() until it ends; every step's output in order.
  std::vector<TrainStepOutput> execute_all_batches(BatchSource& source);
  // Drops whatever is in flight / the ended state, so the next progress() starts a new pass
  // (call after the ranks ended together, e.g. between epochs). Local.
  virtual void reset();

  const PipelineModel& model() const { return model_; }
  int64_t steps() const { return step_; }
  virtual std::string name() const = 0;

 protected:
  // This rank's next batch and the agreement on it, in flight.
  struct Proposal {
    std::optional<Batch> batch;
    detail::InputCheckStatus check;  // this rank's half of the input check on `batch`
    Tensor all;  // every rank's {has a batch, check words...}, once `agreement` is done
    Work agreement;
  };
  // Fetches the next batch of `source`, checks it, and launches the agreement (the all_gather)
  // without waiting for it.
  Proposal propose_next(BatchSource& source, StepTimes& times);
  // Waits for the agreement: the batch if every rank has one (InvalidArgument on every rank
  // when any rank's batch fails the input check; it then needs no input check of its own).
  // Adds the wait to `times`.
  std::optional<Batch> agreed(Proposal& proposal, StepTimes& times);
  // Both at once.
  std::optional<Batch> agree_next(BatchSource& source, StepTimes& times);
  // Lookup + output dist, dense forward, backward, finish, optimizers, zero_grad.
  TrainStepOutput compute_step(const Batch& batch, ShardedEmbeddingContext& ctx,
                               const std::vector<KeyedJaggedTensor>& dist_input,
                               StepTimes& times, const std::function<void()>& after_output_dist);

  PipelineModel model_;
  int64_t step_ = 0;
  bool ended_ = false;
};

// No overlap: each step fetches, dists, computes and steps its own batch.
class TrainPipelineBase : public TrainPipeline {
 public:
  using TrainPipeline::TrainPipeline;
  std::optional<TrainStepOutput> progress(BatchSource& source) override;
  std::string name() const override { return "base"; }
};

// Batch i+1's input dist in flight during batch i's compute (see the top of this file).
class TrainPipelineSparseDist : public TrainPipeline {
 public:
  using TrainPipeline::TrainPipeline;
  std::optional<TrainStepOutput> progress(BatchSource& source) override;
  void reset() override;
  std::string name() const override { return "sparse_dist"; }

 private:
  struct InFlight {
    Batch batch;
    ShardedEmbeddingContext ctx;
    ShardedInputDistAwaitable phase1;
    Awaitable<std::vector<KeyedJaggedTensor>> phase2;
    std::vector<KeyedJaggedTensor> dist_input;
    int stage = 0;  // 1: phase 1 issued, 2: phase 2 issued, 3: received
  };
  // Starts `batch`'s input dist (phase 1).
  std::unique_ptr<InFlight> start(Batch batch, StepTimes& times);
  void advance(InFlight& f, int to_stage, StepTimes& times);

  std::unique_ptr<InFlight> current_;
  std::optional<Proposal> proposal_;  // the batch after `current_`'s successor, agreeing
  bool filled_ = false;
};

}  // namespace ferry::torchrec
