// The train pipelines: the step shared by both, the exhaustion agreement, and the sparse-dist
// pipeline's bookkeeping of the batch in flight.
#include <ferry/collectives/torchrec/train_pipeline/train_pipeline.h>

#include <ferry/collectives/collectives.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <chrono>
#include <utility>

namespace ferry::torchrec {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

TrainPipeline::TrainPipeline(PipelineModel model) : model_(std::move(model)) {
  FERRY_CHECK(model_.dmp != nullptr, InvalidArgument, "TrainPipeline: no DistributedModelParallel");
  FERRY_CHECK(model_.dense_step != nullptr, InvalidArgument, "TrainPipeline: no dense step");
  const Group& group = model_.dmp->group();
  std::string all_names;
  for (const std::shared_ptr<ShardedModule>& m : model_.dmp->sharded_modules()) {
    auto stages = std::dynamic_pointer_cast<ShardedEmbeddingModule>(m);
    if (!stages) continue;  // not pipelined: stepped by the dmp only
    const std::string name = stages->name();
    FERRY_CHECK(std::find(names_.begin(), names_.end(), name) == names_.end(), InvalidArgument,
                "TrainPipeline on rank ", group.rank(), ": two pipelined modules are named \"",
                name, "\" (their inputs and outputs are found by name)");
    // The agreement runs on the dmp's group and each module reads its peers' check words in
    // its own rank order: the two must be the same ranks in the same order.
    FERRY_CHECK(stages->world().members() == group.members(), InvalidArgument,
                "TrainPipeline on rank ", group.rank(), ": module \"", name, "\" runs on ",
                stages->world().describe(), ", expected the DistributedModelParallel's ",
                group.describe());
    modules_.push_back(std::move(stages));
    names_.push_back(name);
    outputs_.modules.push_back(name);
    all_names += (all_names.empty() ? "\"" : ", \"") + name + "\"";
  }
  for (const std::string& name : names_) {
    auto it = model_.inputs.find(name);
    inputs_.push_back(it == model_.inputs.end() ? nullptr : it->second);
  }
  for (const auto& [name, fn] : model_.inputs) {
    FERRY_CHECK(std::find(names_.begin(), names_.end(), name) != names_.end(), InvalidArgument,
                "TrainPipeline on rank ", group.rank(), ": an input is given for \"", name,
                "\", which is no pipelined module (pipelined: ",
                all_names.empty() ? std::string("none") : all_names, ")");
    FERRY_CHECK(fn != nullptr, InvalidArgument, "TrainPipeline on rank ", group.rank(),
                ": the input of \"", name, "\" is null");
  }
}

std::vector<TrainStepOutput> TrainPipeline::execute_all_batches(BatchSource& source) {
  std::vector<TrainStepOutput> outputs;
  while (std::optional<TrainStepOutput> out = progress(source)) outputs.push_back(std::move(*out));
  return outputs;
}

void TrainPipeline::reset() {
  step_ = 0;
  ended_ = false;
}

namespace {
constexpr int64_t kCheckWords = detail::InputCheckStatus::kWords;
}  // namespace

TrainPipeline::Proposal TrainPipeline::propose_next(BatchSource& source, StepTimes& times) {
  auto t0 = Clock::now();
  Proposal p;
  p.batch = source.next_batch();
  times.data += seconds_since(t0);
  t0 = Clock::now();
  // {has a batch, module 0's check words, module 1's, ...}: one exchange for all of them.
  const auto per_rank = static_cast<int64_t>(1 + modules_.size() * kCheckWords);
  const Group& group = model_.dmp->group();
  if (!agreement_mine_.defined()) {
    agreement_mine_ = empty({per_rank}, DType::Int64);
    agreement_all_ = empty({group.size() * per_rank}, DType::Int64);
  }
  int64_t* mine = agreement_mine_.data<int64_t>();
  mine[0] = p.batch.has_value() ? 1 : 0;
  p.modules = std::move(spare_modules_);
  p.modules.resize(modules_.size());
  for (size_t m = 0; m < modules_.size(); ++m) {
    ModuleBatch& mb = p.modules[m];
    if (p.batch) {
      mb.input = inputs_[m] ? inputs_[m](*p.batch) : p.batch->sparse;
      mb.check = modules_[m]->input_check_status(mb.input);
    } else {
      mb.check = {std::vector<int64_t>(kCheckWords, 0), ""};
    }
    std::copy(mb.check.words.begin(), mb.check.words.end(), mine + 1 + m * kCheckWords);
  }
  // The previous agreement was waited for (agreed, reset) before this one is proposed, so its
  // buffers are free.
  p.all = agreement_all_;
  p.agreement = all_gather(agreement_mine_, p.all, group);
  times.agreement += seconds_since(t0);
  return p;
}

std::optional<TrainPipeline::InFlight> TrainPipeline::agreed(Proposal& p, StepTimes& times) {
  const auto t0 = Clock::now();
  p.agreement.wait();
  const double t = seconds_since(t0);
  times.agreement += t;
  times.comm_wait += t;
  const size_t per_rank = 1 + modules_.size() * kCheckWords;
  const int64_t* all = p.all.data<int64_t>();
  const size_t ranks = static_cast<size_t>(p.all.numel()) / per_rank;
  for (size_t r = 0; r < ranks; ++r)
    if (all[r * per_rank] == 0) return std::nullopt;  // some rank has no batch: nobody starts one
  for (size_t m = 0; m < modules_.size(); ++m) {
    module_words_.clear();
    for (size_t r = 0; r < ranks; ++r) {
      const int64_t* first = all + r * per_rank + 1 + m * kCheckWords;
      module_words_.insert(module_words_.end(), first, first + kCheckWords);
    }
    modules_[m]->raise_input_check(module_words_, p.modules[m].check);
  }
  InFlight f;
  f.batch = std::move(*p.batch);
  f.modules = std::move(p.modules);
  return f;
}

std::optional<TrainPipeline::InFlight> TrainPipeline::agree_next(BatchSource& source,
                                                                 StepTimes& times) {
  Proposal p = propose_next(source, times);
  return agreed(p, times);
}

void TrainPipeline::start(InFlight& f, StepTimes& times) {
  const auto t0 = Clock::now();
  for (size_t m = 0; m < modules_.size(); ++m) {
    ModuleBatch& mb = f.modules[m];
    // Made once per module slot and kept with the slot from batch to batch (the input dist
    // resets it), so a step allocates no context or lists in it.
    if (!mb.ctx) mb.ctx = modules_[m]->create_context();
    mb.phase1 = modules_[m]->input_dist_checked(*mb.ctx, mb.input);
  }
  f.stage = 1;
  times.input_dist += seconds_since(t0);
}

void TrainPipeline::advance(InFlight& f, int to_stage, StepTimes& times) {
  const auto t0 = Clock::now();
  if (f.stage == 1 && to_stage >= 2) {
    for (ModuleBatch& mb : f.modules) mb.phase2 = mb.phase1.wait();
    f.stage = 2;
  }
  if (f.stage == 2 && to_stage >= 3) {
    for (ModuleBatch& mb : f.modules) mb.dist_input = mb.phase2.wait();
    f.stage = 3;
  }
  const double t = seconds_since(t0);
  times.input_dist += t;
  times.comm_wait += t;
}

TrainStepOutput TrainPipeline::compute_step(InFlight& f, StepTimes& times,
                                            const std::function<void()>& after_output_dist) {
  DistributedModelParallel& dmp = *model_.dmp;
  const Batch& batch = f.batch;
  auto t0 = Clock::now();
  // Every module's output dist is started before the first is waited: one module's lookups run
  // while another's output travels. The outputs live in a member that keeps its capacity, so a
  // step allocates nothing for them.
  SparseOutputs& sparse = outputs_;
  sparse.outputs.clear();
  for (size_t m = 0; m < modules_.size(); ++m)
    sparse.outputs.push_back(
        modules_[m]->compute_and_output_dist(*f.modules[m].ctx, f.modules[m].dist_input));
  for (LazyAwaitable<EmbeddingModuleOutput>& a : sparse.outputs) a.value();
  const double lookup = seconds_since(t0);
  times.lookup_output_dist += lookup;
  times.comm_wait += lookup;
  if (after_output_dist) after_output_dist();

  t0 = Clock::now();
  DenseStepResult result = model_.dense_step(batch, sparse);
  times.dense_forward += seconds_since(t0);

  t0 = Clock::now();
  result.loss.backward();
  times.backward += seconds_since(t0);
  sparse.outputs.clear();  // this batch's outputs (and their graph) are no longer needed

  // DistributedModelParallel::step(), split to time its parts.
  t0 = Clock::now();
  const bool has_reducer = !dmp.replicated_parameters().empty();
  if (has_reducer) dmp.reducer().finish();
  const double finish = seconds_since(t0);
  times.grad_all_reduce += finish;
  times.comm_wait += finish;
  t0 = Clock::now();
  if (has_reducer) dmp.dense_optimizer().step();
  times.optimizer += seconds_since(t0);
  t0 = Clock::now();
  for (auto& module : dmp.sharded_modules()) module->fused_optimizer_step();
  const double sparse_step = seconds_since(t0);
  times.sparse_optimizer += sparse_step;
  times.comm_wait += sparse_step;
  t0 = Clock::now();
  dmp.zero_grad();
  times.optimizer += seconds_since(t0);

  TrainStepOutput out;
  out.step = step_++;
  out.logits = result.logits.value().clone();
  out.labels = batch.labels;
  out.loss = result.loss.value().item();
  return out;
}

std::optional<TrainStepOutput> TrainPipelineBase::progress(BatchSource& source) {
  if (ended_) return std::nullopt;
  const auto step_start = Clock::now();
  StepTimes times;
  std::optional<InFlight> f = agree_next(source, times);
  if (!f) {
    ended_ = true;
    return std::nullopt;
  }
  start(*f, times);
  advance(*f, 3, times);
  TrainStepOutput out = compute_step(*f, times, nullptr);
  times.total = seconds_since(step_start);
  out.times = times;
  return out;
}

void TrainPipelineSparseDist::reset() {
  TrainPipeline::reset();
  current_.reset();
  // Every rank launched this agreement: it completes (and its batch is dropped) here.
  if (proposal_) proposal_->agreement.wait();
  proposal_.reset();
  filled_ = false;
}

std::optional<TrainStepOutput> TrainPipelineSparseDist::progress(BatchSource& source) {
  if (ended_) return std::nullopt;
  const auto step_start = Clock::now();
  StepTimes times;
  if (!filled_) {
    // Fill: the first batch's input dists, completed.
    filled_ = true;
    current_ = agree_next(source, times);
    if (current_) {
      start(*current_, times);
      advance(*current_, 3, times);
      proposal_ = propose_next(source, times);
    }
  }
  if (!current_) {
    ended_ = true;
    return std::nullopt;
  }
  // Batch i's input dists have completed: start batch i+1's if every rank has one (agreed while
  // the previous step computed), and propose batch i+2.
  std::optional<InFlight> next;
  if (proposal_) {
    next = agreed(*proposal_, times);
    proposal_.reset();
    if (next) {
      start(*next, times);
      proposal_ = propose_next(source, times);
    }
  }
  // Batch i's step; once its output dists are in hand, batch i+1's phase 2 is issued.
  TrainStepOutput out = compute_step(*current_, times, [&] {
    if (next) advance(*next, 2, times);
  });
  if (next) advance(*next, 3, times);
  // The next proposal refills these: each slot keeps only its module's context (which the next
  // input dist resets), so neither the list nor the contexts are made again.
  spare_modules_ = std::move(current_->modules);
  for (ModuleBatch& mb : spare_modules_) {
    std::unique_ptr<ShardedModuleContext> ctx = std::move(mb.ctx);
    mb = ModuleBatch{};
    mb.ctx = std::move(ctx);
  }
  current_ = std::move(next);  // empty when the data ended: the next call returns nullopt
  times.total = seconds_since(step_start);
  out.times = times;
  return out;
}

}  // namespace ferry::torchrec
