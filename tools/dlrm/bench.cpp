#include "tools/dlrm/bench.h"

#include "tools/heap_count/heap_allocations.h"
#include "tools/dlrm/compute_limit.h"

#include <ferry/backends/transport.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ferry::dlrm_tool {

namespace {

using namespace ferry::torchrec;

// The prepared batches, served in turn for `total` steps: the steps read memory that is already
// there, as a loader that keeps up would give it to them.
class PreparedBatches : public BatchSource {
 public:
  PreparedBatches(std::vector<Batch> batches, int64_t total)
      : batches_(std::move(batches)), total_(total) {}
  std::optional<Batch> next_batch() override {
    if (next_ >= total_) return std::nullopt;
    return batches_[static_cast<size_t>(next_++) % batches_.size()];
  }
  int64_t num_batches() const override { return total_; }
  void reset() override { next_ = 0; }

 private:
  std::vector<Batch> batches_;
  int64_t total_;
  int64_t next_ = 0;
};

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

struct Stage {
  const char* name;
  double StepTimes::*field;
};

const Stage kStages[] = {
    {"data", &StepTimes::data},
    {"agreement", &StepTimes::agreement},
    {"input_dist", &StepTimes::input_dist},
    {"lookup_output_dist", &StepTimes::lookup_output_dist},
    {"dense_forward", &StepTimes::dense_forward},
    {"backward", &StepTimes::backward},
    {"grad_all_reduce", &StepTimes::grad_all_reduce},
    {"dense_optimizer", &StepTimes::optimizer},
    {"data_parallel_tables", &StepTimes::sparse_optimizer},
};

// Every rank's per-step totals, the slowest rank's per step.
std::vector<double> slowest_rank(const std::vector<double>& mine, Group& world) {
  Tensor t = from_vector<double>(mine);
  all_reduce(t, world, ReduceOp::Max).wait();
  return t.to_vector<double>();
}

// Every rank's value, in rank order (each rank fills its slot of a sum).
std::vector<double> per_rank(double v, Group& world) {
  Tensor t = zeros({world.size()}, DType::Float64);
  t.data<double>()[world.rank()] = v;
  all_reduce(t, world).wait();
  return t.to_vector<double>();
}

double sum_over_ranks(double v, Group& world) {
  Tensor t = full({1}, v, DType::Float64);
  all_reduce(t, world).wait();
  return t.item();
}

}  // namespace

ComputeLimit step_compute_limit(const Options& o, const ShardedDlrm& m, double ids_per_rank,
                                Group& world) {
  double table_bytes = 0;
  for (const auto& [name, shards] : m.sebc->local_state_dict())
    for (const LocalShard& shard : shards)
      table_bytes += static_cast<double>(shard.tensor.nbytes());
  StepShape shape;
  shape.batch = o.batch;
  const DlrmConfig dc = dlrm_config(o);
  shape.dense_in = dc.dense_in_features;
  shape.bottom = dc.dense_arch_layer_sizes;
  shape.top = dc.over_arch_layer_sizes;
  shape.num_sparse = o.tables;
  shape.dim = o.dim;
  shape.ids_per_rank = ids_per_rank;
  shape.table_bytes_per_rank = table_bytes;
  barrier(world).wait();
  return measure_compute_limit(shape);
}

int run_bench(const Options& o, Group& world) {
  const int W = world.size();
  const bool printer = world.rank() == 0;
  const SyntheticCriteo data = make_data(o);
  const ShardingPlan plan = make_plan(o, W);
  if (printer) std::printf("%s\n", plan_report(o, plan, W).c_str());  // what is timed, and why
  std::unique_ptr<ShardedDlrm> m = build(o, *plan.get_plan_for_module("sparse.ebc"), world);

  // A batch of its own for every step (up to 256, then they repeat), generated before anything
  // is timed: repeating a few batches would keep their table rows in cache, which training on
  // new data does not.
  ShardOptions so;
  so.batch_size = o.batch;
  so.rank = world.rank();
  so.world_size = W;
  Options direct = o;
  direct.prefetch = 0;  // no loader thread left running (and allocating) beside the timed steps
  std::unique_ptr<BatchSource> source = make_source(direct, data, Split::Train, so);
  std::vector<Batch> batches;
  double ids = 0;
  const auto wanted = static_cast<size_t>(std::min(o.warmup_steps + o.bench_steps, 256));
  while (batches.size() < wanted) {
    std::optional<Batch> b = source->next_batch();
    if (!b) break;
    ids += static_cast<double>(b->sparse.values().numel());
    batches.push_back(std::move(*b));
  }
  if (batches.empty()) throw InvalidArgument("ferry-dlrm --bench: no full batch in the data");
  // The ids looked up per step and rank: every rank's ids, spread evenly over the ranks.
  const double ids_per_rank = sum_over_ranks(ids / static_cast<double>(batches.size()), world) /
                              static_cast<double>(W);
  ComputeLimit limit = step_compute_limit(o, *m, ids_per_rank, world);

  const int total = o.warmup_steps + o.bench_steps;
  PreparedBatches prepared(std::move(batches), total);
  std::vector<StepTimes> times;
  std::vector<double> totals;
  uint64_t allocs_before = 0;
  barrier(world).wait();
  for (int step = 0; step < total; ++step) {
    if (step == o.warmup_steps) allocs_before = tools::heap_allocations();
    std::optional<TrainStepOutput> out = m->pipeline->progress(prepared);
    if (!out) break;
    if (step >= o.warmup_steps) {
      times.push_back(out->times);
      totals.push_back(1e3 * out->times.total);
    }
  }
  // Counted over the whole process: under the local transport its W ranks are threads of it.
  const double allocs = static_cast<double>(tools::heap_allocations() - allocs_before) /
                        static_cast<double>(std::max<size_t>(1, times.size()));
  // Measured again after the steps (and after their allocations were counted).
  limit = faster_of(limit, step_compute_limit(o, *m, ids_per_rank, world));
  const double allocs_per_rank =
      sum_over_ranks(allocs, world) / static_cast<double>(W) /
      (world.transport().name() == "local" ? static_cast<double>(W) : 1.0);
  const std::vector<double> slowest = slowest_rank(totals, world);
  // Where the ranks wait on each other: each rank's median time blocked in waits on
  // communication, and its median time at work (the step minus that).
  std::vector<double> my_wait, my_busy;
  for (const StepTimes& t : times) {
    my_wait.push_back(1e3 * t.comm_wait);
    my_busy.push_back(1e3 * (t.total - t.comm_wait));
  }
  const std::vector<double> waits = per_rank(percentile(my_wait, 0.5), world);
  const std::vector<double> busy = per_rank(percentile(my_busy, 0.5), world);
  const double med = percentile(slowest, 0.5), lo = percentile(slowest, 0);
  const double p90 = percentile(slowest, 0.9);
  const double samples_per_s = med > 0 ? 1e3 * static_cast<double>(W * o.batch) / med : 0;
  const double limit_ms = limit.total_ms();
  if (printer) {
    std::vector<std::pair<const char*, double>> stages;
    for (const Stage& s : kStages) {
      std::vector<double> v;
      for (const StepTimes& t : times) v.push_back(1e3 * (t.*s.field));
      stages.emplace_back(s.name, percentile(v, 0.5));
    }
    std::printf("bench: %d ranks (%s), batch %lld per rank, sharding %s, %s pipeline: step median "
                "%.3f ms (min %.3f, p90 %.3f) over %zu steps after %d warm-up, %.0f samples/s; "
                "compute limit %.3f ms (GEMMs %.3f at %.1f GFLOP/s, interaction %.3f, embedding "
                "rows %.3f at %.1f GB/s): the step is %.2fx the limit; %.0f heap allocations per "
                "step and rank\n",
                W, world.transport().name().c_str(), static_cast<long long>(o.batch),
                o.sharding.c_str(),
                m->pipeline->name().c_str(), med, lo, p90, slowest.size(), o.warmup_steps,
                samples_per_s, limit_ms, limit.gemm_ms, limit.gemm_gflops, limit.interaction_ms,
                limit.embedding_ms, limit.copy_gbps, limit_ms > 0 ? med / limit_ms : 0.0,
                allocs_per_rank);
    std::printf("bench stages (rank 0 medians, ms):");
    for (const auto& [name, v] : stages) std::printf(" %s %.3f", name, v);
    std::printf("\n");
    if (W > 1) {
      std::printf("bench ranks (medians, ms): at work");
      for (int r = 0; r < W; ++r) std::printf(" %.3f", busy[static_cast<size_t>(r)]);
      std::printf("; waiting on communication");
      for (int r = 0; r < W; ++r) std::printf(" %.3f", waits[static_cast<size_t>(r)]);
      std::printf("\n");
    }
    std::string json = "{\"bench\":\"ferry-dlrm\",\"ranks\":" + std::to_string(W) +
                       ",\"transport\":\"" + world.transport().name() + "\",\"batch\":" +
                       std::to_string(o.batch) + ",\"sharding\":\"" + o.sharding +
                       "\",\"pipeline\":\"" + m->pipeline->name() + "\",\"steps\":" +
                       std::to_string(slowest.size()) + ",\"warmup\":" +
                       std::to_string(o.warmup_steps);
    char buf[1024];
    std::snprintf(buf, sizeof buf,
                  ",\"step_ms\":{\"median\":%.4f,\"min\":%.4f,\"p90\":%.4f},\"samples_per_s\":%.1f,"
                  "\"flops_per_step\":%.0f,\"embedding_bytes_per_step\":%.0f,"
                  "\"gemm_gflops\":%.2f,\"best_gemm_gflops\":%.2f,\"copy_gbps\":%.2f,"
                  "\"limit_ms\":{\"total\":%.4f,\"gemm\":%.4f,\"interaction\":%.4f,"
                  "\"embedding\":%.4f},\"step_over_limit\":%.3f,\"allocs_per_step\":%.1f",
                  med, lo, p90, samples_per_s, limit.gemm_flops + limit.interaction_flops,
                  limit.embedding_bytes, limit.gemm_gflops, limit.best_gflops, limit.copy_gbps,
                  limit_ms, limit.gemm_ms, limit.interaction_ms, limit.embedding_ms,
                  limit_ms > 0 ? med / limit_ms : 0.0, allocs_per_rank);
    json += buf;
    json += ",\"stages_ms\":{";
    for (size_t i = 0; i < stages.size(); ++i) {
      std::snprintf(buf, sizeof buf, "%s\"%s\":%.4f", i ? "," : "", stages[i].first,
                    stages[i].second);
      json += buf;
    }
    json += "},\"rank_busy_ms\":[";
    for (int r = 0; r < W; ++r) {
      std::snprintf(buf, sizeof buf, "%s%.4f", r ? "," : "", busy[static_cast<size_t>(r)]);
      json += buf;
    }
    json += "],\"rank_comm_wait_ms\":[";
    for (int r = 0; r < W; ++r) {
      std::snprintf(buf, sizeof buf, "%s%.4f", r ? "," : "", waits[static_cast<size_t>(r)]);
      json += buf;
    }
    json += "]}";
    std::printf("%s\n", json.c_str());
    if (!o.bench_json.empty()) {
      std::FILE* f = std::fopen(o.bench_json.c_str(), "a");
      if (f == nullptr || std::fprintf(f, "%s\n", json.c_str()) < 0 || std::fclose(f) != 0)
        throw InvalidArgument("ferry-dlrm: cannot append to " + o.bench_json);
    }
    std::fflush(stdout);
  }
  if (o.max_allocs_per_step >= 0 && allocs_per_rank > o.max_allocs_per_step) {
    if (printer)
      std::fprintf(stderr, "ferry-dlrm --bench: %.1f heap allocations per step and rank, more "
                   "than the %.0f allowed (--max-allocs-per-step)\n",
                   allocs_per_rank, o.max_allocs_per_step);
    return 1;
  }
  return 0;
}

}  // namespace ferry::dlrm_tool
