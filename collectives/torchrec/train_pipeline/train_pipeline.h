// ferry::torchrec train pipelines: one training step per progress() call over a model whose
// sharded embedding modules (any number of ShardedEmbeddingBagCollections and
// ShardedEmbeddingCollections, whatever their sharding types, data_parallel included) and
// replicated dense part are stepped by a DistributedModelParallel.
//
//   PipelineModel model;
//   model.dmp = &dmp;   // its ShardedEbcModule / ShardedEcModule are the pipelined modules
//   model.dense_step = [&](const Batch& b, const SparseOutputs& sparse) {
//     const PooledEmbeddings& p = sparse.pooled();   // the one bag collection's output
//     Variable logits = dlrm.forward_with_embeddings(Variable(b.dense),
//                                                    {p.keys, p.length_per_key, p.values});
//     return DenseStepResult{logits, bce_with_logits(logits, b.labels)};
//   };
//   TrainPipelineSparseDist pipeline(model);
//   while (std::optional<TrainStepOutput> out = pipeline.progress(source)) { ... }
//   pipeline.reset();   // next epoch (after source.reset())
//
// The pipelined modules are found as torchrec finds the ShardedModules of a model: every one of
// the DistributedModelParallel's sharded modules that is a ShardedEmbeddingModule (the
// ShardedEbcModule / ShardedEcModule wrappers are), in its order. Each takes the batch's sparse
// KJT (its input dist picks its own features by name) unless PipelineModel::inputs gives it
// another. Other sharded modules are only stepped by the DistributedModelParallel.
//
// One step, per rank: every module's sparse input dist (both KJT all-to-all phases) -> every
// module's lookup and output dist started, then waited, in module order -> dense forward and
// loss -> backward (the fused sparse optimizers update the touched rows inside it; the reducer
// launches the dense gradients' all_reduces) -> the reducer's finish -> the dense optimizer ->
// every sharded module's fused_optimizer_step (data_parallel tables) -> zero_grad.
// TrainPipelineBase runs exactly that, batch after batch. TrainPipelineSparseDist starts batch
// i+1's input dists right after batch i's completed (and before batch i's lookups), so they
// travel while batch i computes; their phase 2 is issued once batch i's output dists are in
// hand, and they are waited after batch i's optimizer step. The input dist reads only ids (never
// the tables), so the model computations and parameter updates of every rank are the base
// pipeline's, in the same order: the two give bit-identical models.
//
// Exhaustion agreement (unlike torchrec, where a rank whose data ended leaves its peers blocked
// in the next input dist until the collective timeout): before a batch's input dists are
// started, every rank contributes "I have a batch" to one all_gather over the
// DistributedModelParallel's group, together with its half of every module's collective input
// check on that batch (so a bad batch raises the same InvalidArgument on every rank, before any
// of its payload moves, and no input dist runs a check exchange of its own). If any rank has no
// batch, no rank starts that input dist: the batches already in flight are drained (their
// steps run on every rank) and then progress() returns std::nullopt on every rank, after the
// same step. A rank with more batches than its peers leaves its extra batches untrained (like
// the samplers' even_batches). So ranks with uneven data end together, cleanly, with matched
// collectives. TrainPipelineSparseDist fetches each batch one step early and launches its
// agreement then, so the agreement travels during a step's compute: it is the step's one small
// synchronisation besides the input dists themselves.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/torchrec/datasets/batch.h>
#include <ferry/collectives/torchrec/model_parallel/model_parallel.h>
#include <ferry/collectives/torchrec/model_parallel/sharded_embedding_module.h>

#include <cstdint>
#include <functional>
#include <map>
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

// Every pipelined module's output for one batch, in module order (on the tape). The pipeline
// has waited every output dist before the dense step, so the accessors do not block.
struct SparseOutputs {
  std::vector<std::string> modules;  // the modules' names
  std::vector<LazyAwaitable<EmbeddingModuleOutput>> outputs;

  // By module name; InvalidArgument naming the modules when there is no such module.
  const EmbeddingModuleOutput& at(const std::string& module) const;
  // A bag collection's / a sequence collection's output: by name, or (name empty) the only one
  // of that kind; InvalidArgument when it is of the other kind, absent or ambiguous.
  const PooledEmbeddings& pooled(const std::string& module = {}) const;
  const SequenceEmbeddings& sequence(const std::string& module = {}) const;
};

struct PipelineModel {
  // Steps the replicated parameters and every sharded module; its ShardedEmbeddingModules are
  // the pipelined ones. Its group carries the agreement.
  DistributedModelParallel* dmp = nullptr;
  // The dense forward and loss of one batch given the modules' outputs.
  std::function<DenseStepResult(const Batch&, const SparseOutputs&)> dense_step;
  // A pipelined module's input from the batch, by module name (absent: the batch's sparse KJT).
  std::map<std::string, std::function<KeyedJaggedTensor(const Batch&)>> inputs;
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
  double agreement = 0;           // the "have a batch" agreement(s), with the input checks
  double input_dist = 0;          // starting + waiting the input dists (both phases)
  double lookup_output_dist = 0;  // compute_and_output_dist + its wait, every module
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
  // Finds the pipelined modules. InvalidArgument (no collective) for a null dmp or dense step,
  // two pipelined modules of one name, a module whose group's ranks are not the dmp's, or an
  // input given for a name that is no pipelined module.
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
  // The pipelined modules, in the dmp's order.
  const std::vector<std::shared_ptr<ShardedEmbeddingModule>>& modules() const { return modules_; }
  int64_t steps() const { return step_; }
  virtual std::string name() const = 0;

 protected:
  // One module's part of a batch: its input, this rank's half of its input check, then its
  // input dist's context (of the module's own kind: its create_context), awaitables and result.
  struct ModuleBatch {
    KeyedJaggedTensor input;
    detail::InputCheckStatus check;
    std::unique_ptr<ShardedModuleContext> ctx;
    ShardedInputDistAwaitable phase1;
    Awaitable<std::vector<KeyedJaggedTensor>> phase2;
    std::vector<KeyedJaggedTensor> dist_input;
  };
  // This rank's next batch and the agreement on it, in flight.
  struct Proposal {
    std::optional<Batch> batch;
    std::vector<ModuleBatch> modules;  // inputs and checks
    Tensor all;  // every rank's {has a batch, each module's check words...}, once agreed
    Work agreement;
  };
  // A batch whose input dists were started: stage 1 phase 1 issued, 2 phase 2 issued, 3 the
  // modules' inputs received (dist_input).
  struct InFlight {
    Batch batch;
    std::vector<ModuleBatch> modules;
    int stage = 0;
  };

  // Fetches the next batch of `source`, checks it, and launches the agreement (the all_gather)
  // without waiting for it.
  Proposal propose_next(BatchSource& source, StepTimes& times);
  // Waits for the agreement: the batch (with its modules' inputs) if every rank has one
  // (InvalidArgument on every rank when any rank's batch fails a module's input check).
  std::optional<InFlight> agreed(Proposal& proposal, StepTimes& times);
  // Both at once.
  std::optional<InFlight> agree_next(BatchSource& source, StepTimes& times);
  // Issues phase 1 of every module's input dist of an agreed batch.
  void start(InFlight& f, StepTimes& times);
  // Moves every module's input dist on to `to_stage` (2 or 3), waiting as needed.
  void advance(InFlight& f, int to_stage, StepTimes& times);
  // Lookups + output dists, dense forward, backward, finish, optimizers, zero_grad;
  // after_output_dist runs once the output dists are in hand.
  TrainStepOutput compute_step(InFlight& f, StepTimes& times,
                               const std::function<void()>& after_output_dist);

  PipelineModel model_;
  std::vector<std::shared_ptr<ShardedEmbeddingModule>> modules_;
  std::vector<std::string> names_;
  std::vector<std::function<KeyedJaggedTensor(const Batch&)>> inputs_;  // per module, or empty
  SparseOutputs outputs_;  // the names, and the step's outputs while it runs (kept capacity)
  // Buffers a step's agreement refills instead of allocating: this rank's words, every rank's
  // (the all_gather's output, free again once agree() waited for it), one module's words of
  // every rank, and the module list of the last batch done with.
  Tensor agreement_mine_, agreement_all_;
  std::vector<int64_t> module_words_;
  std::vector<ModuleBatch> spare_modules_;
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

// Batch i+1's input dists in flight during batch i's compute (see the top of this file).
class TrainPipelineSparseDist : public TrainPipeline {
 public:
  using TrainPipeline::TrainPipeline;
  std::optional<TrainStepOutput> progress(BatchSource& source) override;
  void reset() override;
  std::string name() const override { return "sparse_dist"; }

 private:
  std::optional<InFlight> current_;
  std::optional<Proposal> proposal_;  // the batch after `current_`'s successor, agreeing
  bool filled_ = false;
};

}  // namespace ferry::torchrec
