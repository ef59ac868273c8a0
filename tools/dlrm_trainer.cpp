// ferry-dlrm: the main demo. Trains a DLRM whose embedding tables are sharded over the ranks
// (ShardedEmbeddingBagCollection by a plan from the planner, or --sharding), whose dense part is
// replicated (DistributedModelParallel: averaged gradients, SGD with momentum), with the sparse
// input dist of the next batch overlapping the current batch's compute (TrainPipelineSparseDist;
// --pipeline off: TrainPipelineBase), on the embedded synthetic Criteo-like data (each rank
// generates only its own batches).
//
// Prints the sharding plan, a progress line with samples/s during each epoch (a terminal only;
// otherwise one line per epoch), per epoch train loss, test loss, test AUC and accuracy, and the
// median step time by stage. Exit status 0 only when
//   - the equivalence check passed: before training, a fresh sharded model (same tables and
//     dense init) trains --check-steps steps through the same pipeline, and rank 0 trains the
//     unsharded model (EmbeddingBagCollection + DLRM) on the same global batches; the logits of
//     every step, every table and every dense parameter must agree within 1e-4 relative to
//     max(1, largest magnitude) (float32 with different summation orders; 5e-2 with a lossy
//     codec), and
//   - the model learned: final test AUC >= dense-only AUC + 0.25 (Bayes AUC - dense-only AUC) of
//     the generator (both computed exactly from the hidden model, datasets/synthetic_criteo.h):
//     above what the dense features alone allow, so the embeddings must have learned.
// Ranks are threads of the local transport by default; under mpiexec (or FERRY_BACKEND=ucx with
// ferry-run) each process is one rank.
#include <ferry/ferry.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tools/cli/args.h"
#include "tools/dlrm/bench.h"
#include "tools/dlrm/checkpoint.h"
#include "tools/dlrm/model.h"
#include "tools/dlrm/run_picture.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using namespace ferry;
using namespace ferry::torchrec;
using namespace ferry::dlrm_tool;  // the model, the checkpoint and the picture (tools/dlrm/)

double sum_over_ranks(double mine, const Group& world) {
  Tensor t = full({1}, mine, DType::Float64);
  all_reduce(t, world).wait();
  return t.item();
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel()) return 1e30;
  double diff = 0, scale = 1;
  for (int64_t i = 0; i < a.numel(); ++i) {
    diff = std::max(diff, std::abs(a.get_flat(i) - b.get_flat(i)));
    scale = std::max(scale, std::abs(b.get_flat(i)));
  }
  return diff / scale;
}

struct CheckResult {
  double logits = 0, tables = 0, dense = 0, tolerance = 0;
  bool passed = false;
};

// Sharded training through the pipeline vs rank 0's unsharded model on the same global batches.
CheckResult equivalence_check(const Options& o, const SyntheticCriteo& data,
                              const ModuleShardingPlan& plan, Group& world) {
  const int W = world.size();
  const int64_t b = o.check_batch;
  std::unique_ptr<ShardedDlrm> m = build(o, plan, world);
  ShardOptions so;
  so.batch_size = b;
  so.rank = world.rank();
  so.world_size = W;
  std::unique_ptr<BatchSource> source = make_source(o, data, Split::Train, so);
  std::vector<Tensor> gathered;
  for (int k = 0; k < o.check_steps; ++k) {
    std::optional<TrainStepOutput> out = m->pipeline->progress(*source);
    if (!out) throw InvalidArgument("ferry-dlrm: too few samples for the equivalence check");
    gathered.push_back(gather_scores(out->logits, out->labels, world).scores);
  }
  std::map<std::string, Tensor> tables = m->sebc->state_dict();
  CheckResult r;
  r.tolerance = o.codec == "fp32" ? 1e-4 : 5e-2;
  std::vector<double> errs(3, 0.0);
  if (world.rank() == 0) {
    EmbeddingBagCollection ebc(table_configs(o), false, o.seed, fused_config(o));
    SparseArch sa(feature_keys(o), o.dim, [&ebc](const KeyedJaggedTensor& k) { return ebc.forward(k); });
    DLRM ref(sa, dlrm_config(o));
    MomentumSgd sgd(ref.dense_parameters(), o.dense_lr, o.momentum);
    // Global step k is the k-th batch of W * b samples of one reader: every rank's k-th batch,
    // in rank order.
    ShardOptions global;
    global.batch_size = W * b;
    std::unique_ptr<BatchSource> all = make_source(o, data, Split::Train, global);
    for (int k = 0; k < o.check_steps; ++k) {
      std::optional<Batch> next = all->next_batch();
      if (!next) throw InvalidArgument("ferry-dlrm: too few samples for the equivalence check");
      const Batch& g = *next;
      Variable logits = ref.forward(Variable(g.dense), g.sparse);
      errs[0] = std::max(errs[0], max_rel_diff(gathered[static_cast<size_t>(k)], logits.value()));
      bce_with_logits(logits, g.labels).backward();
      sgd.step();
      sgd.zero_grad();
    }
    for (const auto& [name, t] : ebc.state_dict()) {
      auto it = tables.find(name);
      errs[1] = std::max(errs[1], it == tables.end() ? 1e30 : max_rel_diff(it->second, t));
    }
    const std::vector<Variable> mine = m->dlrm->dense_parameters();
    const std::vector<Variable> theirs = ref.dense_parameters();
    for (size_t i = 0; i < mine.size(); ++i)
      errs[2] = std::max(errs[2], max_rel_diff(mine[i].value(), theirs[i].value()));
  }
  Tensor e = from_vector<double>(errs);
  broadcast(e, 0, world).wait();
  r.logits = e.get_flat(0);
  r.tables = e.get_flat(1);
  r.dense = e.get_flat(2);
  r.passed = r.logits <= r.tolerance && r.tables <= r.tolerance && r.dense <= r.tolerance;
  return r;
}

// One pass over `test` (kept from one evaluation to the next, so that its batches are made once).
BinaryMetrics evaluate(const ShardedDlrm& m, BatchSource& test, const Group& world) {
  NoGradGuard no_grad;
  test.reset();
  std::vector<float> probs, labels;
  while (std::optional<Batch> b = test.next_batch()) {
    Tensor logits = m.logits(*b, m.sebc->forward(b->sparse)).value();
    for (int64_t i = 0; i < logits.numel(); ++i) {
      probs.push_back(static_cast<float>(1.0 / (1.0 + std::exp(-logits.get_flat(i)))));
      labels.push_back(static_cast<float>(b->labels.get_flat(i)));
    }
  }
  return gathered_binary_metrics(from_vector<float>(probs), from_vector<float>(labels), world);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Outcome {
  CheckResult check;
  double auc = 0, threshold = 0;
  bool ok = false;
};

// Rank 0: prints the plan and the learning threshold (from the generator's best and dense-only
// AUCs, or --min-auc) and returns it; the other ranks return 0.
double print_plan_and_threshold(const Options& o, const SyntheticCriteo& data,
                                const ShardingPlan& plan, int W, bool printer) {
  if (!printer) return 0;
  double threshold = 0;
  std::printf("%s\n", plan_report(o, plan, W).c_str());
  if (o.data.empty()) {
    const double bayes = data.bayes_auc(8192), dense_only = data.dense_only_auc(8192);
    threshold = o.min_auc >= 0 ? o.min_auc : dense_only + 0.25 * (bayes - dense_only);
    std::printf("generator: Bayes AUC %.4f, dense-only AUC %.4f -> learning threshold %.4f\n",
                bayes, dense_only, threshold);
  } else {
    // Real data has no known best AUC: better than chance unless --min-auc says otherwise.
    threshold = o.min_auc >= 0 ? o.min_auc : 0.5;
    std::printf("data: %s -> learning threshold %.4f\n", o.data.c_str(), threshold);
  }
  std::fflush(stdout);
  return threshold;
}

// --metrics: the CSV file with its header line (null without the option).
std::FILE* open_metrics(const Options& o) {
  if (o.metrics.empty()) return nullptr;
  std::FILE* csv = std::fopen(o.metrics.c_str(), "w");
  if (csv == nullptr) throw InvalidArgument("ferry-dlrm: cannot write " + o.metrics);
  std::fprintf(csv, "epoch,step,pipeline,world_size,batch,data_ms,agreement_ms,input_dist_ms,"
                    "lookup_output_dist_ms,dense_forward_ms,backward_ms,grad_all_reduce_ms,"
                    "optimizer_ms,sparse_optimizer_ms,comm_wait_ms,total_ms,loss\n");
  return csv;
}

// What one epoch's steps add up to on this rank.
struct EpochSteps {
  double loss_sum = 0;
  int64_t steps = 0;
  double seconds = 0;
};

// Runs `train` through the pipeline once: every step's loss into step_losses, its stage
// times into last_epoch (and the --metrics CSV), a progress bar on a terminal.
EpochSteps train_epoch(const Options& o, ShardedDlrm& m, BatchSource& train, int epoch,
                       int64_t steps_per_epoch, int W, bool show_progress, std::FILE* csv,
                       std::vector<StepTimes>& last_epoch,
                       std::vector<double>& step_losses) {
  EpochSteps r;
  const auto start = std::chrono::steady_clock::now();
  while (std::optional<TrainStepOutput> out = m.pipeline->progress(train)) {
    r.loss_sum += out->loss;
    step_losses.push_back(out->loss);
    ++r.steps;
    last_epoch.push_back(out->times);
    if (csv != nullptr) {
      const StepTimes& t = out->times;
      std::fprintf(csv, "%d,%lld,%s,%d,%lld,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.6f\n",
                   epoch, static_cast<long long>(out->step), m.pipeline->name().c_str(), W,
                   static_cast<long long>(o.batch), 1e3 * t.data, 1e3 * t.agreement,
                   1e3 * t.input_dist, 1e3 * t.lookup_output_dist, 1e3 * t.dense_forward,
                   1e3 * t.backward, 1e3 * t.grad_all_reduce, 1e3 * t.optimizer,
                   1e3 * t.sparse_optimizer, 1e3 * t.comm_wait, 1e3 * t.total, out->loss);
    }
    if (show_progress) {
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const int width = 30;
      const int filled = static_cast<int>(width * r.steps / std::max<int64_t>(1, steps_per_epoch));
      std::printf("\repoch %d [%s%s] %lld/%lld steps, %.0f samples/s, loss %.4f ", epoch,
                  std::string(static_cast<size_t>(filled), '=').c_str(),
                  std::string(static_cast<size_t>(width - filled), ' ').c_str(),
                  static_cast<long long>(r.steps), static_cast<long long>(steps_per_epoch),
                  static_cast<double>(r.steps * W * o.batch) / secs, r.loss_sum / r.steps);
      std::fflush(stdout);
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

// Rank 0's last lines: the last epoch's median step by stage beside the compute limit, and the
// --svg picture.
void print_step_summary(const Options& o, const ShardedDlrm& m, int W,
                        const std::vector<StepTimes>& last_epoch, double limit_ms,
                        const std::vector<double>& step_losses,
                        const std::vector<int64_t>& epoch_end_steps,
                        const std::vector<EpochRecord>& records, double auc_threshold) {
  // Medians over the last epoch's steps (rank 0), skipping the first (pipeline fill).
  auto med = [&](double StepTimes::*field) {
    std::vector<double> v;
    for (size_t i = last_epoch.size() > 1 ? 1 : 0; i < last_epoch.size(); ++i)
      v.push_back(1e3 * (last_epoch[i].*field));
    return median(v);
  };
  const double total = med(&StepTimes::total);
  std::printf("step time (rank 0, %s pipeline, median of the last epoch): %.2f ms = data %.2f + "
              "agreement %.2f + input dist %.2f + lookup/output dist %.2f + dense fwd %.2f + "
              "backward %.2f + grad all_reduce %.2f + dense optimizer %.2f + data_parallel "
              "tables %.2f ms; waiting on "
              "communication %.2f ms (%.0f%%)\n",
              m.pipeline->name().c_str(), total, med(&StepTimes::data),
              med(&StepTimes::agreement), med(&StepTimes::input_dist),
              med(&StepTimes::lookup_output_dist), med(&StepTimes::dense_forward),
              med(&StepTimes::backward), med(&StepTimes::grad_all_reduce),
              med(&StepTimes::optimizer), med(&StepTimes::sparse_optimizer),
              med(&StepTimes::comm_wait),
              total > 0 ? 100.0 * med(&StepTimes::comm_wait) / total : 0.0);
  std::printf("compute limit of the step on this machine: %.2f ms (its GEMMs, interaction and "
              "embedding rows at the speed measured for them): the step is %.1fx the limit; "
              "ferry-dlrm --bench times the step alone\n",
              limit_ms, limit_ms > 0 ? total / limit_ms : 0.0);
  // More ranks than cores: a rank's step also holds the time its core ran the others, which
  // the line above counts as waiting on communication. Said, so the multiple is not misread.
  const auto cores = static_cast<int>(std::thread::hardware_concurrency());
  if (cores > 0 && o.ranks_on_host > cores)
    std::printf("(%d ranks share this machine's %d cores, so each step includes the other ranks' "
                "turns on its core; --bench --world-size %d times a step with a core per rank)\n",
                o.ranks_on_host, cores, cores);
  if (!o.svg.empty()) {
    RunPicture picture;
    picture.title = "ferry-dlrm: " + std::to_string(W) + " ranks, " + m.pipeline->name() +
                    " pipeline, sharding " + o.sharding + ", batch " +
                    std::to_string(o.batch) + " per rank";
    picture.step_loss = step_losses;
    picture.epoch_end_steps = epoch_end_steps;
    picture.epochs = records;
    picture.auc_threshold = auc_threshold;
    picture.stages = {{"data", med(&StepTimes::data)},
                      {"agreement", med(&StepTimes::agreement)},
                      {"input dist", med(&StepTimes::input_dist)},
                      {"lookup + output dist", med(&StepTimes::lookup_output_dist)},
                      {"dense forward", med(&StepTimes::dense_forward)},
                      {"backward", med(&StepTimes::backward)},
                      {"grad all_reduce", med(&StepTimes::grad_all_reduce)},
                      {"dense optimizer", med(&StepTimes::optimizer)},
                      {"data_parallel tables", med(&StepTimes::sparse_optimizer)}};
    picture.step_ms = total;
    picture.compute_limit_ms = limit_ms;
    write_svg(o.svg, picture);
    std::printf("wrote %s\n", o.svg.c_str());
  }
}

void print_check(const Options& o, const CheckResult& check, int W) {
  std::printf("equivalence with unsharded single-process training (%d steps, global batch %lld): "
              "max rel. diff logits %.2e, tables %.2e, dense %.2e (tolerance %.0e): %s\n",
              o.check_steps, static_cast<long long>(o.check_batch * W), check.logits,
              check.tables, check.dense, check.tolerance, check.passed ? "passed" : "FAILED");
  std::fflush(stdout);
}

// After the first epoch, rank 0 says whether the later epochs read their batches from memory
// (once, so that the first epoch's slower steps are not a surprise).
void print_data_cache(const Options& o, const BatchSource& train, const BatchSource& test) {
  const auto* kept = dynamic_cast<const CachingSource*>(&train);
  const auto* kept_test = dynamic_cast<const CachingSource*>(&test);
  if (kept != nullptr && kept->serving_from_memory()) {
    char test_part[64] = "";
    if (kept_test != nullptr && kept_test->serving_from_memory())
      std::snprintf(test_part, sizeof test_part, ", test %.1f MiB",
                    static_cast<double>(kept_test->cached_bytes()) / (1 << 20));
    std::printf("data: the later epochs read this rank's batches from memory (train %.1f "
                "MiB%s; --data-cache-mb)\n",
                static_cast<double>(kept->cached_bytes()) / (1 << 20), test_part);
  } else if (kept != nullptr && kept->over_budget()) {
    std::printf("data: the train split's batches exceed --data-cache-mb %lld: every epoch "
                "makes them again\n", static_cast<long long>(o.data_cache_mb));
  }
}

Outcome run(const Options& o, Group& world) {
  const int W = world.size();
  const bool printer = world.rank() == 0;
  const bool tty = isatty(1) != 0;
  const SyntheticCriteo data = make_data(o);
  const ShardingPlan plan = make_plan(o, W);
  const ModuleShardingPlan module_plan = *plan.get_plan_for_module("sparse.ebc");
  Outcome outcome;
  outcome.threshold = print_plan_and_threshold(o, data, plan, W, printer);
  outcome.threshold = sum_over_ranks(outcome.threshold, world);

  // The equivalence check against single-process training.
  outcome.check = equivalence_check(o, data, module_plan, world);
  if (printer) print_check(o, outcome.check, W);

  std::unique_ptr<ShardedDlrm> m = build(o, module_plan, world);
  ShardOptions so;
  so.batch_size = o.batch;
  so.rank = world.rank();
  so.world_size = W;
  std::unique_ptr<BatchSource> train_source = make_source(o, data, Split::Train, so);
  BatchSource& train = *train_source;
  std::unique_ptr<BatchSource> test_source = make_source(o, data, Split::Test, so);
  const int64_t steps_per_epoch = train.num_batches();
  std::FILE* csv = printer ? open_metrics(o) : nullptr;
  std::vector<StepTimes> last_epoch;
  std::vector<EpochRecord> records;
  std::vector<double> step_losses;       // this rank's loss of every step, for the picture
  std::vector<int64_t> epoch_end_steps;  // steps done when each epoch ended
  auto& dense_opt = dynamic_cast<MomentumSgd&>(m->dmp->dense_optimizer());
  const std::vector<Variable> dense = m->dlrm->dense_parameters();
  int first_epoch = 1;
  if (!o.resume.empty()) {
    // Collective: every rank loads its own shards, or every rank raises the same error.
    const Resumed r = load_dlrm_checkpoint(o.resume, o.epochs, *m->sebc, dense, dense_opt, world);
    first_epoch = static_cast<int>(r.epochs_done) + 1;
    if (printer) {
      std::printf("resumed from %s after epoch %lld\n", r.directory.c_str(),
                  static_cast<long long>(r.epochs_done));
      std::fflush(stdout);
    }
    // Nothing left to train: the verdict is the loaded model's.
    if (r.epochs_done == o.epochs) outcome.auc = evaluate(*m, *test_source, world).auc;
  }
  for (int epoch = first_epoch; epoch <= o.epochs; ++epoch) {
    train.reset();
    m->pipeline->reset();
    last_epoch.clear();
    const EpochSteps done = train_epoch(o, *m, train, epoch, steps_per_epoch, W, printer && tty,
                                        csv, last_epoch, step_losses);
    const double loss_sum = done.loss_sum;
    const int64_t steps = done.steps;
    const double secs = done.seconds;
    const double train_loss = sum_over_ranks(loss_sum, world) /
                              std::max(1.0, sum_over_ranks(static_cast<double>(steps), world));
    const BinaryMetrics test = evaluate(*m, *test_source, world);
    outcome.auc = test.auc;
    records.push_back(EpochRecord{train_loss, test.log_loss, test.auc});
    epoch_end_steps.push_back(static_cast<int64_t>(step_losses.size()));
    if (!o.checkpoint.empty()) {
      // Collective: each rank writes its shards; visible once every rank's part is on disk.
      save_dlrm_checkpoint(o.checkpoint, epoch, *m->sebc, dense, dense_opt, world);
    }
    if (printer) {
      if (tty) std::printf("\r%*s\r", 100, "");
      std::printf("epoch %d: %lld steps, %.0f samples/s | train loss %.4f | test loss %.4f  "
                  "AUC %.4f  accuracy %.2f%%\n",
                  epoch, static_cast<long long>(steps),
                  static_cast<double>(steps * W * o.batch) / secs, train_loss, test.log_loss,
                  test.auc, 100.0 * test.accuracy);
      if (epoch == first_epoch && epoch < o.epochs) {
        print_data_cache(o, *train_source, *test_source);
      }
      std::fflush(stdout);
    }
  }
  if (csv != nullptr) std::fclose(csv);
  // The step beside its compute limit on this machine, measured here by every rank together
  // (about 0.3 s); the ids per step are the data's mean bag length times the features.
  const double bag = o.data.empty() ? data.config().mean_pooling_factor : 1.0;
  const double limit_ms =
      step_compute_limit(o, *m, bag * static_cast<double>(o.batch * o.tables), world).total_ms();
  if (printer && !last_epoch.empty()) {
    print_step_summary(o, *m, W, last_epoch, limit_ms, step_losses, epoch_end_steps, records,
                       outcome.threshold);
  }
  outcome.ok = outcome.check.passed && outcome.auc >= outcome.threshold;
  return outcome;
}

Options parse(int argc, char** argv) {
  Options o;
  std::string pipeline = "on";
  cli::Parser p("ferry-dlrm", "[options]",
                "Trains a DLRM whose embedding tables are sharded over the ranks (threads of the\n"
                "local transport, or one process per rank under mpiexec / ferry-run), after an\n"
                "equivalence check against unsharded training. Exit status 0 when the check\n"
                "passed and the test AUC cleared the threshold, 1 otherwise, 2 for a bad command\n"
                "line.");
  p.int_option("-n, --world-size", "ranks of the local transport (default 4)", &o.world_size, 1,
               1024)
      .int_option("--epochs", "training epochs (default 3)", &o.epochs, 1, 1000)
      .int_option("--batch", "samples per rank and step (default 128)", &o.batch, 1, 1 << 20)
      .int_option("--tables", "embedding tables (default 26)", &o.tables, 1, 4096)
      .int_option("--max-rows", "rows per table at most (default 10000)", &o.max_rows, 1,
                  int64_t{1} << 32)
      .int_option("--dim", "embedding dim (default 16)", &o.dim, 1, 4096)
      .int_option("--train-samples", "samples per epoch (default 65536)", &o.train_samples, 1,
                  int64_t{1} << 32)
      .int_option("--test-samples", "test samples (default 8192)", &o.test_samples, 1,
                  int64_t{1} << 32)
      .string_option("--sharding", "planner|tw|rw|cw|dp|twcw|twrw|mixed (default planner)",
                     &o.sharding, "TYPE")
      .string_option("--codec", "fp32|fp16|bf16|fp8|int8[,BWD] (default fp32)", &o.codec, "NAME")
      .choice_option("--pipeline", "sparse-dist pipeline or the base one (default on)",
                     &pipeline, {"on", "off"})
      .string_option("--metrics", "write per-step metrics as CSV", &o.metrics, "PATH")
      .string_option("--svg", "write a picture of the run", &o.svg, "PATH")
      .string_option("--checkpoint", "write a checkpoint after every epoch", &o.checkpoint, "PATH")
      .string_option("--resume", "resume from a checkpoint", &o.resume, "PATH")
      .option("--seed", "N", "data and initialisation seed (default 0)",
              [&](const std::string& v) {
                o.seed = static_cast<uint64_t>(cli::parse_int("--seed", v, 0, INT64_MAX));
              })
      .double_option("--dense-lr", "dense SGD learning rate (default 0.05)", &o.dense_lr, 1e-12,
                     1e6)
      .double_option("--sparse-lr", "sparse learning rate (default 30)", &o.sparse_lr, 1e-12, 1e6)
      .int_option("--check-steps", "steps of the equivalence check (default 3)", &o.check_steps,
                  1, 1000)
      .int_option("--check-batch", "batch of the equivalence check (default 32)", &o.check_batch,
                  1, 1 << 20)
      .double_option("--min-auc", "learning threshold (default: from the generator)", &o.min_auc,
                     0, 1)
      .flag("--bench", "time the training step instead of training: warm-up, then timed steps on "
            "batches prepared beforehand; prints the step's median, stages, allocations and "
            "its multiple of this machine's compute limit (a human line and a JSON line)",
            [&] { o.bench = true; })
      .int_option("--bench-steps", "timed steps of --bench (default 50)", &o.bench_steps, 1,
                  100000)
      .int_option("--warmup",
                  "untimed steps before them (default 200: two ranks sharing two cores take "
                  "about a hundred steps to reach their steady pace)",
                  &o.warmup_steps, 0, 100000)
      .string_option("--data", "train on this Criteo TSV file (label, 13 integer and 26 hex "
                     "columns) instead of the embedded synthetic data", &o.data, "PATH")
      .string_option("--test-data", "evaluate on this Criteo TSV file (default: --data)",
                     &o.test_data, "PATH")
      .int_option("--threads", "threads per rank for the GEMMs, the embedding lookups and "
                  "their backward, and the interaction (default 1; pays only with idle cores, "
                  "one rank per host: where ranks fill the cores, helpers take cores from them)",
                  &o.threads, 1, 256)
      .int_option("--ranks-per-node", "plan and shard as if each node held this many ranks, "
                  "whatever the job's hosts (default: each host's ranks)",
                  &o.forced_ranks_per_node, 1, 65536)
      .option("--cross-host-bandwidth", "RATE", kCrossHostBandwidthHelp,
              [&](const std::string& v) { parse_cross_host_bandwidth(o, v); })
      .int_option("--prefetch", "batches a loader thread prepares ahead (default 2; 0: no "
                  "loader: each batch is made when the step asks for it)", &o.prefetch, 0, 64)
      .choice_option("--loader", "where the synthetic batches are made: a loader thread; a "
                     "loader thread of idle priority (it runs only on a core no rank needs at "
                     "that moment, so the step's data stage is only the wait for a batch); or "
                     "the rank's own waits for collectives (no thread to take a core from the "
                     "ranks); auto: waits when this host's ranks fill its cores, else a thread "
                     "(default auto)", &o.loader, {"auto", "thread", "idle", "waits"})
      .int_option("--data-cache-mb", "keep a split's batches in memory after the first epoch "
                  "and read later epochs from there, while they fit in this many MiB per rank "
                  "and split (default 1024; 0: make them again every epoch)",
                  &o.data_cache_mb, 0, int64_t{1} << 30)
      .string_option("--bench-json", "also append --bench's JSON line to this file",
                     &o.bench_json, "PATH")
      .double_option("--max-allocs-per-step", "--bench exits 1 when a step makes more heap "
                     "allocations per rank (the allocation test's bound)",
                     &o.max_allocs_per_step, 0, 1e9);
  p.parse(argc, argv);
  o.pipeline = pipeline == "on";
  // Refused here, before anything is built or printed, like every other bad command line.
  const std::vector<std::string> shardings = {"planner", "tw", "rw", "cw", "dp",
                                              "twcw", "twrw", "mixed"};
  if (std::find(shardings.begin(), shardings.end(), o.sharding) == shardings.end())
    throw cli::UsageError("--sharding " + o.sharding +
                          ": expected planner, tw, rw, cw, dp, twcw, twrw or mixed");
  if (o.codec != "fp32") {
    try {
      const size_t comma = o.codec.find(',');
      (void)comm_type_from_name(o.codec.substr(0, comma));
      if (comma != std::string::npos) (void)comm_type_from_name(o.codec.substr(comma + 1));
    } catch (const std::exception&) {
      throw cli::UsageError("--codec " + o.codec + ": expected fp32, fp16, bf16, fp8 or int8, "
                            "optionally FWD,BWD");
    }
  }
  return o;
}

}  // namespace

const char* where_batches_are_made(const Options& o) {
  if (o.bench) return "batches made before the timed steps";
  if (loader_in_waits(o)) return "batches made in the ranks' waits";
  if (o.prefetch <= 0) return "batches made when the step asks";
  return o.loader == "idle" ? "batches made by a loader thread of idle priority"
                            : "batches made by a loader thread";
}

int run_main(int argc, char** argv) {
  Options o = parse(argc, argv);
  set_intra_op_threads(o.threads);
  Group launched = init();
  const bool one_process_per_rank = launched.size() > 1;
  const int world_size = one_process_per_rank ? launched.size() : o.world_size;
  o.world_size = world_size;
  learn_nodes(o, launched, one_process_per_rank);
  if (o.test_samples < o.batch * world_size || o.train_samples < o.batch * world_size)
    throw cli::UsageError("--train-samples and --test-samples must hold at least one global batch");
  if (!one_process_per_rank || launched.rank() == 0) {
    std::printf("ferry-dlrm: DLRM on %d ranks (%s), %d tables (<= %lld rows, dim %lld) sharded "
                "by %s, batch %lld per rank, %s pipeline, codec %s, %d epochs of %lld samples, "
                "%s\n",
                world_size, one_process_per_rank ? backend_name().c_str() : "local transport",
                o.tables, static_cast<long long>(o.max_rows), static_cast<long long>(o.dim),
                o.sharding.c_str(), static_cast<long long>(o.batch),
                o.pipeline ? "sparse-dist" : "base", o.codec.c_str(), o.epochs,
                static_cast<long long>(o.train_samples), where_batches_are_made(o));
    std::fflush(stdout);
  }
  if (o.bench) {
    int status = 0;
    if (one_process_per_rank) {
      status = run_bench(o, launched);
    } else {
      std::mutex mutex;
      run_ranks(world_size, [&](Group& world) {
        const int mine = run_bench(o, world);
        std::lock_guard lock(mutex);
        status = std::max(status, mine);
      });
    }
    finalize();
    return status;
  }
  Outcome result;
  if (one_process_per_rank) {
    result = run(o, launched);
  } else {
    std::mutex mutex;
    run_ranks(world_size, [&](Group& world) {
      Outcome mine = run(o, world);
      std::lock_guard lock(mutex);
      if (world.rank() == 0) result = mine;
    });
  }
  if (!one_process_per_rank || launched.rank() == 0) {
    std::printf("ferry-dlrm: equivalence %s; test AUC %.4f %s threshold %.4f: %s\n",
                result.check.passed ? "passed" : "FAILED", result.auc,
                result.auc >= result.threshold ? ">=" : "<", result.threshold,
                result.ok ? "the sharded DLRM learned" : "FAILED");
    if (result.check.passed && result.auc < result.threshold) {
      // The usual cause: a larger batch at the same learning rate and epochs makes fewer steps.
      const long long global_batch = o.batch * world_size;
      std::printf("ferry-dlrm: this run made %lld optimizer steps (%d epochs of %lld samples, "
                  "global batch %lld); the model learns by the step, so a larger batch needs "
                  "more of them to clear the threshold: raise --epochs or --train-samples\n",
                  static_cast<long long>(o.epochs) * (o.train_samples / global_batch), o.epochs,
                  static_cast<long long>(o.train_samples), global_batch);
    }
  }
  finalize();
  return result.ok ? 0 : 1;
}

int main(int argc, char** argv) {
  return cli::guarded_main("ferry-dlrm", [&] { return run_main(argc, argv); });
}
