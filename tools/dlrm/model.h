// ferry-dlrm's model: the command line's options and what they build on each rank (the data,
// the sharding plan, the sharded DLRM with its pipeline). Shared by the training run
// (tools/dlrm_trainer.cpp) and the benchmark (tools/dlrm/bench.cpp).
#pragma once

#include <ferry/ferry.h>
#include <ferry/collectives/torchrec/torchrec.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ferry::dlrm_tool {

struct Options {
  int world_size = 4;
  int epochs = 3;
  int64_t batch = 128;  // per rank
  int tables = 26;
  int64_t max_rows = 10000;
  int64_t dim = 16;
  int64_t train_samples = 65536;
  int64_t test_samples = 8192;
  std::string sharding = "planner";
  std::string codec = "fp32";
  bool pipeline = true;
  std::string metrics;
  std::string svg;
  std::string checkpoint;  // written after every epoch
  std::string resume;      // read before training
  std::string data;        // Criteo TSV file to train on; empty: the embedded synthetic data
  std::string test_data;   // Criteo TSV file to evaluate on; empty: `data`
  int prefetch = 2;        // batches the loader thread prepares ahead (0: no loader thread)
  int threads = 1;         // intra-op threads per rank (set_intra_op_threads)
  // Where the synthetic batches are drawn: "thread" (a loader thread, `prefetch` ahead),
  // "waits" (in the rank's own waits for collectives), or "auto": "waits" when this host's
  // ranks fill its cores (a loader thread would take a core from a rank), else "thread".
  std::string loader = "auto";
  int ranks_on_host = 1;  // set at start: the ranks of this job on this rank's host
  // Set at start: the ranks of a node, for the sharding types that keep a table inside one
  // (table-row-wise, table-column-wise) and for the planner: every host's ranks when the
  // job's hosts hold as many each, in consecutive ranks (torchrec's nodes); 0 when they do not
  // (3 + 1 ranks), where no two ranks are taken to share a node.
  int ranks_per_node = 1;
  int forced_ranks_per_node = 0;  // --ranks-per-node: plan with nodes of this many ranks (0: off)
  // --cross-host-bandwidth: measure it at start, or the bytes per second given (0: not given).
  bool measure_bandwidth = false;
  double cross_host_bandwidth = 0;
  // Set at start (learn_nodes): the bandwidths the planner prices bytes at, and whence they came.
  torchrec::HostBandwidths bandwidths;
  // A split's batches are kept in memory after the first epoch while they fit in this many MiB
  // per rank and split (CachingSource); 0: every epoch makes them again.
  int64_t data_cache_mb = 1024;
  uint64_t seed = 0;
  double dense_lr = 0.05;
  double momentum = 0.9;
  double sparse_lr = 30.0;
  int check_steps = 3;
  int64_t check_batch = 32;
  double min_auc = -1;  // < 0: from the generator
  // --bench: timed steps on batches prepared before the timed loop instead of training.
  bool bench = false;
  int bench_steps = 50;
  int warmup_steps = 200;  // two ranks on two cores run slower for their first ~100 steps
  std::string bench_json;  // also append the JSON line to this file
  double max_allocs_per_step = -1;  // --bench fails (exit 1) above this many; < 0: no bound
};

std::vector<int64_t> cardinalities(const Options& o);
torchrec::SyntheticCriteo make_data(const Options& o);
std::vector<torchrec::EmbeddingBagConfig> table_configs(const Options& o);
std::vector<torchrec::PlannerTable> planner_tables(const Options& o);
// The node size of a job of processes, from where its ranks run (Options::ranks_per_node).
int ranks_per_node(const Group& world);
// Sets o.ranks_on_host and o.ranks_per_node (o.world_size set): for the local transport's
// threads one host, for processes (`processes`) the hosts the ranks learnt at init, then
// --ranks-per-node if given (InvalidArgument when it does not divide the world size); and
// o.bandwidths: the given cross-host figure, else with --cross-host-bandwidth measure the
// figures measured between the hosts (collective over `launched`: every rank calls this), else
// the planner's defaults, saying why.
void learn_nodes(Options& o, const Group& launched, bool processes);
// --cross-host-bandwidth's value: "measure", or a rate such as 10gbit, 800mbit, 1.25GB/s or
// 900MB/s (cli::UsageError otherwise).
void parse_cross_host_bandwidth(Options& o, const std::string& text);
extern const char* const kCrossHostBandwidthHelp;
torchrec::Topology topology(const Options& o, int world_size);
// What rank 0 prints before training: the bandwidths the plan was priced at (and whence), then
// the plan (format_plan: its tables, ranks, costs and the bytes that cross nodes per step).
std::string plan_report(const Options& o, const torchrec::ShardingPlan& plan, int world_size);
// The plan: the planner's, or every table (or a cycle over the tables) of one type.
torchrec::ShardingPlan make_plan(const Options& o, int world_size);
torchrec::DlrmConfig dlrm_config(const Options& o);
torchrec::FusedOptimizerConfig fused_config(const Options& o);
std::vector<std::string> feature_keys(const Options& o);

// A rank's batches of one split: the synthetic data's, or with --data the Criteo TSV files'
// (--data for training, --test-data, else --data, for evaluation), read ahead by a loader thread
// (PrefetchingSource) when o.prefetch > 0, so that a step finds its batch ready; or, for the
// synthetic data when loader_in_waits(o), drawn in the rank's waits for collectives; kept in
// memory from the second pass on within o.data_cache_mb (CachingSource).
bool loader_in_waits(const Options& o);
std::unique_ptr<torchrec::BatchSource> make_source(const Options& o,
                                                   const torchrec::SyntheticCriteo& data,
                                                   torchrec::Split split,
                                                   const torchrec::ShardOptions& shard);

// One rank's sharded model and its pipeline.
struct ShardedDlrm {
  std::shared_ptr<torchrec::ShardedEmbeddingBagCollection> sebc;
  std::unique_ptr<torchrec::SparseArch> sparse;
  std::unique_ptr<torchrec::DLRM> dlrm;
  std::unique_ptr<torchrec::DistributedModelParallel> dmp;
  std::unique_ptr<torchrec::TrainPipeline> pipeline;

  Variable logits(const torchrec::Batch& b, const torchrec::PooledEmbeddings& pooled) const;

  // logits()'s argument for the DLRM, refilled at every step: its lists keep their capacity
  // (a copy per step was two allocations). Only the rank's own thread calls logits().
  mutable torchrec::SparseArchOutput embeddings;
};

std::unique_ptr<ShardedDlrm> build(const Options& o, const torchrec::ModuleShardingPlan& plan,
                                   Group& world);

}  // namespace ferry::dlrm_tool
