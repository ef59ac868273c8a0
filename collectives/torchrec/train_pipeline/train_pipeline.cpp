// The train pipelines: the step shared by both, the exhaustion agreement, and the sparse-dist
// pipeline's bookkeeping of the batch in flight.
#include <ferry/collectives/torchrec/train_pipeline/train_pipeline.h>

#include <ferry/collectives/collectives.h>
#include <ferry/runtime/error.h>

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
  FERRY_CHECK(model_.sparse != nullptr, InvalidArgument, "TrainPipeline: no sharded collection");
  FERRY_CHECK(model_.dmp != nullptr, InvalidArgument, "TrainPipeline: no DistributedModelParallel");
  FERRY_CHECK(model_.dense_step != nullptr, InvalidArgument, "TrainPipeline: no dense step");
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

TrainPipeline::Proposal TrainPipeline::propose_next(BatchSource& source, StepTimes& times) {
  auto t0 = Clock::now();
  Proposal p;
  p.batch = source.next_batch();
  times.data += seconds_since(t0);
  t0 = Clock::now();
  constexpr int64_t kWords = 1 + detail::InputCheckStatus::kWords;
  if (p.batch) {
    p.check = model_.sparse->input_check_status(p.batch->sparse);
  } else {
    p.check.words.assign(detail::InputCheckStatus::kWords, 0);
  }
  std::vector<int64_t> mine{p.batch.has_value() ? 1 : 0};
  mine.insert(mine.end(), p.check.words.begin(), p.check.words.end());
  const Group& world = model_.sparse->world();
  p.all = empty({world.size() * kWords}, DType::Int64);
  p.agreement = all_gather(from_vector(mine), p.all, world);
  times.agreement += seconds_since(t0);
  return p;
}

std::optional<Batch> TrainPipeline::agreed(Proposal& p, StepTimes& times) {
  const auto t0 = Clock::now();
  p.agreement.wait();
  const double t = seconds_since(t0);
  times.agreement += t;
  times.comm_wait += t;
  constexpr size_t kWords = 1 + detail::InputCheckStatus::kWords;
  const std::vector<int64_t> all = p.all.to_vector<int64_t>();
  std::vector<int64_t> checks;
  for (size_t r = 0; r < all.size() / kWords; ++r) {
    if (all[r * kWords] == 0) return std::nullopt;  // some rank has no batch: nobody starts one
    checks.insert(checks.end(), all.begin() + static_cast<std::ptrdiff_t>(r * kWords + 1),
                  all.begin() + static_cast<std::ptrdiff_t>((r + 1) * kWords));
  }
  model_.sparse->raise_input_check(checks, p.check);
  return std::move(p.batch);
}

std::optional<Batch> TrainPipeline::agree_next(BatchSource& source, StepTimes& times) {
  Proposal p = propose_next(source, times);
  return agreed(p, times);
}

TrainStepOutput TrainPipeline::compute_step(const Batch& batch, ShardedEmbeddingContext& ctx,
                                            const std::vector<KeyedJaggedTensor>& dist_input,
                                            StepTimes& times,
                                            const std::function<void()>& after_output_dist) {
  DistributedModelParallel& dmp = *model_.dmp;
  auto t0 = Clock::now();
  LazyAwaitable<PooledEmbeddings> awaiting = model_.sparse->compute_and_output_dist(ctx, dist_input);
  PooledEmbeddings pooled = awaiting.value();
  const double lookup = seconds_since(t0);
  times.lookup_output_dist += lookup;
  times.comm_wait += lookup;
  if (after_output_dist) after_output_dist();

  t0 = Clock::now();
  DenseStepResult result = model_.dense_step(batch, pooled);
  times.dense_forward += seconds_since(t0);

  t0 = Clock::now();
  result.loss.backward();
  times.backward += seconds_since(t0);

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
  std::optional<Batch> batch = agree_next(source, times);
  if (!batch) {
    ended_ = true;
    return std::nullopt;
  }
  auto t0 = Clock::now();
  ShardedEmbeddingContext ctx;
  ShardedInputDistAwaitable phase1 = model_.sparse->input_dist_checked(ctx, batch->sparse);
  std::vector<KeyedJaggedTensor> dist_input = phase1.wait().wait();
  const double dist = seconds_since(t0);
  times.input_dist += dist;
  times.comm_wait += dist;
  TrainStepOutput out = compute_step(*batch, ctx, dist_input, times, nullptr);
  times.total = seconds_since(step_start);
  out.times = times;
  return out;
}

std::unique_ptr<TrainPipelineSparseDist::InFlight> TrainPipelineSparseDist::start(
    Batch batch, StepTimes& times) {
  const auto t0 = Clock::now();
  auto f = std::make_unique<InFlight>();
  f->batch = std::move(batch);
  f->phase1 = model_.sparse->input_dist_checked(f->ctx, f->batch.sparse);
  f->stage = 1;
  times.input_dist += seconds_since(t0);
  return f;
}

void TrainPipelineSparseDist::advance(InFlight& f, int to_stage, StepTimes& times) {
  const auto t0 = Clock::now();
  if (f.stage == 1 && to_stage >= 2) {
    f.phase2 = f.phase1.wait();
    f.stage = 2;
  }
  if (f.stage == 2 && to_stage >= 3) {
    f.dist_input = f.phase2.wait();
    f.stage = 3;
  }
  const double t = seconds_since(t0);
  times.input_dist += t;
  times.comm_wait += t;
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
    // Fill: the first batch's input dist, completed.
    filled_ = true;
    if (std::optional<Batch> first = agree_next(source, times)) {
      current_ = start(std::move(*first), times);
      advance(*current_, 3, times);
      proposal_ = propose_next(source, times);
    }
  }
  if (!current_) {
    ended_ = true;
    return std::nullopt;
  }
  // Batch i's input dist has completed: start batch i+1's if every rank has one (agreed while
  // the previous step computed), and propose batch i+2.
  std::unique_ptr<InFlight> next;
  if (proposal_) {
    std::optional<Batch> batch = agreed(*proposal_, times);
    proposal_.reset();
    if (batch) {
      next = start(std::move(*batch), times);
      proposal_ = propose_next(source, times);
    }
  }
  // Batch i's step; once its output dist is in hand, batch i+1's phase 2 is issued.
  TrainStepOutput out = compute_step(current_->batch, current_->ctx, current_->dist_input, times,
                                     [&] {
                                       if (next) advance(*next, 2, times);
                                     });
  if (next) advance(*next, 3, times);
  current_ = std::move(next);  // empty when the data ended: the next call returns nullopt
  times.total = seconds_since(step_start);
  out.times = times;
  return out;
}

}  // namespace ferry::torchrec
