#include "tools/dlrm/model.h"

#include "tools/cli/args.h"
#include "tools/dlrm/checkpoint.h"  // MomentumSgd

#include <algorithm>
#include <map>
#include <thread>
#include <utility>

namespace ferry::dlrm_tool {

using namespace ferry::torchrec;

std::vector<int64_t> cardinalities(const Options& o) {
  std::vector<int64_t> c = default_cardinalities(o.tables);
  for (int64_t& v : c) v = std::min(v, o.max_rows);
  return c;
}

SyntheticCriteo make_data(const Options& o) {
  SyntheticCriteoConfig cfg;
  cfg.num_sparse = o.tables;
  cfg.cardinalities = cardinalities(o);
  cfg.num_train = o.train_samples;
  cfg.num_test = o.test_samples;
  cfg.seed = o.seed;
  return SyntheticCriteo(cfg);
}

std::vector<EmbeddingBagConfig> table_configs(const Options& o) {
  std::vector<EmbeddingBagConfig> configs;
  const std::vector<int64_t> rows = cardinalities(o);
  for (int t = 0; t < o.tables; ++t) {
    EmbeddingBagConfig c;
    c.name = "t_" + std::to_string(t);
    c.num_embeddings = rows[static_cast<size_t>(t)];
    c.embedding_dim = o.dim;
    c.feature_names = {"cat_" + std::to_string(t)};
    c.pooling = PoolingType::Mean;
    configs.push_back(c);
  }
  return configs;
}

std::vector<PlannerTable> planner_tables(const Options& o) {
  std::vector<PlannerTable> out;
  for (const EmbeddingBagConfig& c : table_configs(o)) {
    PlannerTable t;
    t.name = c.name;
    t.rows = c.num_embeddings;
    t.dim = c.embedding_dim;
    t.pooling_factor = 3.0;
    out.push_back(t);
  }
  return out;
}

int ranks_per_node(const Group& world) {
  const HostLayout layout = world.host_layout();
  if (!layout.known) return get_local_size(world.size());  // the launcher's say, or one host
  return layout.uniform() && layout.contiguous() ? layout.local_size() : 0;
}

void learn_nodes(Options& o, const Group& launched, bool processes) {
  o.ranks_on_host = o.ranks_per_node = o.world_size;
  if (processes) {
    const HostLayout layout = launched.host_layout();
    o.ranks_on_host = layout.known ? layout.local_size() : get_local_size(o.world_size);
    o.ranks_per_node = ranks_per_node(launched);
  }
  if (o.forced_ranks_per_node > 0) {
    if (o.world_size % o.forced_ranks_per_node != 0)
      throw InvalidArgument("--ranks-per-node " + std::to_string(o.forced_ranks_per_node) +
                            " must divide the world size " + std::to_string(o.world_size));
    o.ranks_per_node = o.forced_ranks_per_node;
  }
  if (o.cross_host_bandwidth > 0) {
    o.bandwidths = given_cross_host_bandwidth(o.cross_host_bandwidth);
  } else if (!o.measure_bandwidth) {
    o.bandwidths = default_host_bandwidths(
        "not measured (--cross-host-bandwidth measure measures them at start, or give it)");
  } else {
    // The local transport's world here is this process alone: nothing to measure, and said so.
    o.bandwidths = measure_host_bandwidths(launched);
  }
}

const char* const kCrossHostBandwidthHelp =
    "the bandwidth between hosts the planner prices bytes at: a rate (10gbit, 800mbit, "
    "1.25GB/s, 900MB/s), or `measure`: a short ping-pong between the hosts at start (the "
    "slowest pair's figure, and the intra-host one too); default: the planner's 12.5 GB/s across "
    "and 100 GB/s inside a host";

void parse_cross_host_bandwidth(Options& o, const std::string& text) {
  if (text == "measure") {
    o.measure_bandwidth = true;
    return;
  }
  // A number and its unit, as tc and link ratings write rates; the unit's bytes per second.
  const std::pair<const char*, double> units[] = {
      {"gbit", 1e9 / 8}, {"mbit", 1e6 / 8}, {"GB/s", 1e9}, {"MB/s", 1e6}};
  for (const auto& [unit, scale] : units) {
    const std::string u = unit;
    if (text.size() > u.size() && text.compare(text.size() - u.size(), u.size(), u) == 0) {
      o.cross_host_bandwidth =
          cli::parse_double("--cross-host-bandwidth", text.substr(0, text.size() - u.size()),
                            1e-6, 1e9) * scale;
      return;
    }
  }
  throw cli::UsageError("--cross-host-bandwidth " + text +
                        ": expected `measure` or a rate with its unit (10gbit, 800mbit, 1.25GB/s, "
                        "900MB/s)");
}

namespace {

// The node size the plan and the sharded tables use: on hosts of different sizes every rank
// is a node of its own (the planner then prices all traffic as crossing nodes), and the types
// that keep a table on one node's ranks are refused.
int node_size(const Options& o, int world_size) {
  if (o.ranks_per_node > 0) return o.ranks_per_node;
  const bool by_node = o.sharding == "twrw" || o.sharding == "twcw" || o.sharding == "mixed";
  if (by_node)
    throw InvalidArgument("--sharding " + o.sharding +
                          " keeps a table on one node's ranks, and this job's " +
                          std::to_string(world_size) +
                          " ranks run on hosts of different sizes (ferry-info --layout shows "
                          "them): use planner, tw, rw, cw or dp, or as many ranks on each host");
  return 1;
}

}  // namespace

Topology topology(const Options& o, int world_size) {
  Topology topo;
  topo.world_size = world_size;
  topo.local_world_size = node_size(o, world_size);
  topo.batch_size = o.batch;
  topo.memory_budget = int64_t{1} << 30;
  o.bandwidths.apply_to(topo);
  return topo;
}

std::string plan_report(const Options& o, const ShardingPlan& plan, int world_size) {
  return "ferry-dlrm: " + o.bandwidths.describe() + "\n" +
         format_plan(plan, {{"sparse.ebc", planner_tables(o)}}, topology(o, world_size));
}

ShardingPlan make_plan(const Options& o, int world_size) {
  if (o.sharding == "planner") {
    return EmbeddingShardingPlanner(topology(o, world_size)).plan(planner_tables(o), "sparse.ebc");
  }
  std::vector<TableShape> shapes;
  for (const PlannerTable& t : planner_tables(o)) shapes.push_back(t.shape());
  std::vector<int> all;
  for (int r = 0; r < world_size; ++r) all.push_back(r);
  const std::vector<std::string> cycle = {"dp", "tw", "cw", "twcw", "rw", "twrw"};
  std::map<std::string, ParameterShardingGenerator> gens;
  for (size_t t = 0; t < shapes.size(); ++t) {
    std::string type = o.sharding == "mixed" ? cycle[t % cycle.size()] : o.sharding;
    ParameterShardingGenerator g;
    if (type == "dp") g = data_parallel();
    else if (type == "tw") g = table_wise(static_cast<int>(t % static_cast<size_t>(world_size)));
    else if (type == "cw") g = column_wise(all);
    else if (type == "twcw") g = table_column_wise(0);
    else if (type == "rw") g = row_wise();
    else if (type == "twrw") g = table_row_wise(0);
    else throw InvalidArgument("ferry-dlrm: unknown --sharding " + o.sharding);
    gens[shapes[t].name] = g;
  }
  ShardingPlan plan;
  plan.set_plan_for_module("sparse.ebc",
                           construct_module_sharding_plan(shapes, gens, world_size,
                                                          node_size(o, world_size), "sparse.ebc"));
  return plan;
}

DlrmConfig dlrm_config(const Options& o) {
  DlrmConfig c;
  c.dense_in_features = 13;
  c.dense_arch_layer_sizes = {64, o.dim};
  c.over_arch_layer_sizes = {64, 1};
  c.seed = o.seed + 1;
  return c;
}

FusedOptimizerConfig fused_config(const Options& o) {
  FusedOptimizerConfig f;
  f.optimizer = EmbOptimType::Sgd;
  f.learning_rate = o.sparse_lr;
  return f;
}

std::vector<std::string> feature_keys(const Options& o) { return criteo_sparse_keys(o.tables); }

bool loader_in_waits(const Options& o) {
  if (!o.data.empty() || o.prefetch <= 0) return false;  // files: read by a thread
  if (o.loader == "waits") return true;
  if (o.loader == "thread" || o.loader == "idle") return false;
  return o.ranks_on_host >= static_cast<int>(std::thread::hardware_concurrency());
}

namespace {

std::unique_ptr<BatchSource> made_source(const Options& o, const SyntheticCriteo& data,
                                         Split split, const ShardOptions& shard) {
  std::unique_ptr<BatchSource> source;
  if (o.data.empty()) {
    if (loader_in_waits(o)) {
      return std::make_unique<SyntheticCriteoSource>(data, split, shard, /*fill_waits=*/true);
    }
    source = std::make_unique<SyntheticCriteoSource>(data, split, shard);
  } else {
    CriteoTsvConfig c;
    c.path = split == Split::Test && !o.test_data.empty() ? o.test_data : o.data;
    c.num_sparse = o.tables;
    c.cardinalities = cardinalities(o);
    source = std::make_unique<CriteoTsvSource>(c, shard);
  }
  if (o.prefetch <= 0) return source;
  return std::make_unique<PrefetchingSource>(
      std::move(source), o.prefetch,
      o.loader == "idle" ? LoaderPriority::Idle : LoaderPriority::Normal);
}

}  // namespace

std::unique_ptr<BatchSource> make_source(const Options& o, const SyntheticCriteo& data,
                                         Split split, const ShardOptions& shard) {
  std::unique_ptr<BatchSource> source = made_source(o, data, split, shard);
  if (o.data_cache_mb <= 0) return source;
  return std::make_unique<CachingSource>(std::move(source), o.data_cache_mb << 20);
}

Variable ShardedDlrm::logits(const Batch& b, const PooledEmbeddings& pooled) const {
  embeddings.keys.assign(pooled.keys.begin(), pooled.keys.end());
  embeddings.length_per_key.assign(pooled.length_per_key.begin(), pooled.length_per_key.end());
  embeddings.values = pooled.values;
  Variable out = dlrm->forward_with_embeddings(Variable(b.dense), embeddings);
  embeddings.values = Variable();  // the step's tensors are not kept past it
  return out;
}


std::unique_ptr<ShardedDlrm> build(const Options& o, const ModuleShardingPlan& plan, Group& world) {
  auto m = std::make_unique<ShardedDlrm>();
  ShardedEmbeddingOptions so;
  so.local_size = node_size(o, world.size());
  if (o.codec != "fp32") {
    const size_t comma = o.codec.find(',');
    const CommType fwd = comm_type_from_name(o.codec.substr(0, comma));
    const CommType bwd =
        comma == std::string::npos ? fwd : comm_type_from_name(o.codec.substr(comma + 1));
    so.qcomms_config = QCommsConfig(fwd, bwd);
  }
  m->sebc = std::make_shared<ShardedEmbeddingBagCollection>(table_configs(o), false, plan, world,
                                                            so, fused_config(o), o.seed);
  ShardedEmbeddingBagCollection* sebc = m->sebc.get();
  m->sparse = std::make_unique<SparseArch>(
      feature_keys(o), o.dim, [sebc](const KeyedJaggedTensor& kjt) { return sebc->forward(kjt); });
  m->dlrm = std::make_unique<DLRM>(*m->sparse, dlrm_config(o));
  const double lr = o.dense_lr, momentum = o.momentum;
  m->dmp = std::make_unique<DistributedModelParallel>(
      m->dlrm->dense_parameters(),
      std::vector<std::shared_ptr<ShardedModule>>{std::make_shared<ShardedEbcModule>(m->sebc)},
      world, [lr, momentum](std::vector<Variable> p) -> std::unique_ptr<Optimizer> {
        return std::make_unique<MomentumSgd>(std::move(p), lr, momentum);
      });
  PipelineModel pm;
  pm.dmp = m->dmp.get();  // its one sharded module, the EBC, is pipelined
  ShardedDlrm* self = m.get();
  pm.dense_step = [self](const Batch& b, const SparseOutputs& sparse) {
    Variable logits = self->logits(b, sparse.pooled());
    return DenseStepResult{logits, bce_with_logits(logits, b.labels)};
  };
  if (o.pipeline) m->pipeline = std::make_unique<TrainPipelineSparseDist>(pm);
  else m->pipeline = std::make_unique<TrainPipelineBase>(pm);
  return m;
}

}  // namespace ferry::dlrm_tool
