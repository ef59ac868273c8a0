// ferry-embedding-bench --sharded: one training step of a ShardedEmbeddingBagCollection per
// sharding type, split into its stages:
//
//   ferry-embedding-bench --sharded [--world-size W] [--local-size L] [--tables T]
//       [--rows-min R0] [--rows-max R1] [--dim D] [--batch B] [--pooling P] [--zipf S]
//       [--sharding all|data_parallel,table_wise,...] [--iters N] [--seed S]
//
// W ranks of the local transport (threads of this process). T tables of R0..R1 rows
// (log-spaced), dim D, float32, one feature each, fused SGD; every rank's batch is B samples of
// SyntheticCriteo (bags of 1 + Poisson(P - 1) ids, power-law ids per table). For each sharding
// type every table gets that type, and a step is timed as
//
//   input dist   sebc.input_dist (the collective input check, launch) + both waits
//   lookup       compute_and_output_dist: the local lookups, tape nodes, output-dist launch
//   output dist  .value(): the wait of the pooled all-to-all / reduce-scatter, assembly
//   backward     backward(sum of the pooled output): the output dist's backward collective,
//                the lookups' backward with the fused update; data_parallel: + the gradient
//                all_reduce and step (step_data_parallel)
//
// The ranks pass a barrier before each step; after it one all_reduce(MAX) of each rank's stage
// times gives the slowest rank's, and the table shows medians of those over the timed steps
// (total: the slowest rank's own total, so the stage columns need not add up to it). Each
// rank's lookup throughput is read against a plain Eigen gather-and-sum loop and the unsharded
// lookup, run by the same ranks at the same time (embedding_step_reference.h).
//
// The first step is a warm-up whose forward is checked against the unsharded
// EmbeddingBagCollection on the same global batch (bit-identical where the summation order is
// the same, relative 1e-5 of the largest output where row blocks add partial sums): exit 1 on a
// mismatch.
#include "tools/embedding_step_bench.h"

#include <ferry/collectives/collectives.h>
#include <ferry/collectives/run_ranks.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tools/embedding_step_reference.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace ferry::embedding_bench {

namespace {

using namespace ferry::torchrec;
using Clock = std::chrono::steady_clock;

struct Options {
  int world_size = 2;
  int local_size = 0;  // 0: W/2 for even W (two nodes, as the equivalence tests), else W
  int64_t tables = 26;
  int64_t rows_min = 10'000, rows_max = 1'000'000;
  int64_t dim = 64, batch = 512, pooling = 20;
  double zipf = 1.05;
  std::vector<ShardingType> types = all_sharding_types();
  int iters = 5;
  uint64_t seed = 7;
};

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// A positive count; "1e6" is accepted.
bool parse_count(const char* s, int64_t& out) {
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (end == s || *end != '\0' || !(v >= 1) || v > 1e15 || v != std::floor(v)) return false;
  out = static_cast<int64_t>(v);
  return true;
}

bool parse_types(const std::string& list, std::vector<ShardingType>& out) {
  out.clear();
  if (list == "all") {
    out = all_sharding_types();
    return true;
  }
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    try {
      out.push_back(parse_sharding_type(list.substr(start, comma - start)));
    } catch (const Error& e) {
      std::fprintf(stderr, "--sharding: %s\n", e.what());
      return false;
    }
    start = comma + 1;
  }
  return !out.empty();
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sharded") continue;
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", a.c_str());
      return false;
    }
    const char* v = argv[++i];
    int64_t n = 0;
    bool ok = true;
    if (a == "--world-size" || a == "--local-size" || a == "--iters" || a == "--seed") {
      ok = parse_count(v, n);
      if (a == "--world-size" || a == "--local-size") ok = ok && n <= 64;
      if (a == "--iters") ok = ok && n <= 1'000'000;
      if (a == "--world-size") o.world_size = static_cast<int>(n);
      else if (a == "--local-size") o.local_size = static_cast<int>(n);
      else if (a == "--iters") o.iters = static_cast<int>(n);
      else o.seed = static_cast<uint64_t>(n);
    } else if (a == "--tables") ok = parse_count(v, o.tables);
    else if (a == "--rows-min") ok = parse_count(v, o.rows_min);
    else if (a == "--rows-max") ok = parse_count(v, o.rows_max);
    else if (a == "--dim") ok = parse_count(v, o.dim);
    else if (a == "--batch") ok = parse_count(v, o.batch);
    else if (a == "--pooling") ok = parse_count(v, o.pooling);
    else if (a == "--zipf") ok = (o.zipf = std::atof(v)) > 0;
    else if (a == "--sharding") ok = parse_types(v, o.types);
    else {
      std::fprintf(stderr, "unknown option %s (see the head of tools/embedding_step_bench.cpp)\n",
                   a.c_str());
      return false;
    }
    if (!ok) {
      std::fprintf(stderr, "bad value '%s' for %s\n", v, a.c_str());
      return false;
    }
  }
  if (o.local_size == 0) o.local_size = o.world_size % 2 == 0 ? o.world_size / 2 : o.world_size;
  if (o.world_size % o.local_size != 0 || o.rows_max < o.rows_min ||
      o.rows_max >= (int64_t{1} << 31)) {
    std::fprintf(stderr,
                 "need --local-size dividing --world-size and rows-min <= rows-max < 2^31\n");
    return false;
  }
  return true;
}

// The 1, 5 and 15 minute load averages (Linux), to quote with the times: the machine is shared.
std::string load_average() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return "unknown";
  double a = 0, b = 0, c = 0;
  const int n = std::fscanf(f, "%lf %lf %lf", &a, &b, &c);
  std::fclose(f);
  if (n != 3) return "unknown";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %.2f %.2f", a, b, c);
  return buf;
}

// Everything the ranks share (read-only once the ranks run).
struct Setup {
  Options o;
  std::vector<EmbeddingBagConfig> configs;
  std::vector<TableShape> shapes;
  std::vector<int64_t> rows;
  Clock::time_point start;
  bool big = false;  // >= 100 MB of tables
};

Setup make_setup(const Options& o) {
  Setup s{.o = o, .configs = {}, .shapes = {}, .rows = {}, .start = Clock::now(), .big = false};
  const std::vector<std::string> keys = criteo_sparse_keys(o.tables);
  const double l0 = std::log(static_cast<double>(o.rows_min));
  const double l1 = std::log(static_cast<double>(o.rows_max));
  double table_bytes = 0;
  for (int64_t t = 0; t < o.tables; ++t) {
    const double f =
        o.tables == 1 ? 0.0 : static_cast<double>(t) / static_cast<double>(o.tables - 1);
    const auto r = static_cast<int64_t>(std::llround(std::exp(l0 + f * (l1 - l0))));
    std::string name = "t";
    name += std::to_string(t);
    s.rows.push_back(r);
    s.configs.push_back({.name = name, .num_embeddings = r, .embedding_dim = o.dim,
                         .feature_names = {keys[static_cast<size_t>(t)]}});
    s.shapes.push_back({name, r, o.dim});
    table_bytes += static_cast<double>(r * o.dim * 4);
  }
  s.big = table_bytes >= 1e8;
  return s;
}

// Progress on stderr (rank 0), with the time since the start; only for runs whose tables are
// big enough to take seconds (or once they did).
template <class... A>
void progress(const Setup& s, const char* fmt, A... a) {
  if (!s.big && seconds(s.start, Clock::now()) < 2) return;
  std::fprintf(stderr, "[%6.1f s] ", seconds(s.start, Clock::now()));
  std::fprintf(stderr, fmt, a...);
  std::fputc('\n', stderr);
}

// Every table of the module on `type`; the layouts are those the legend below the table states.
ModuleShardingPlan plan_for(const Setup& s, ShardingType type) {
  const int W = s.o.world_size, L = s.o.local_size, G = W / L;
  std::map<std::string, ParameterShardingGenerator> gens;
  for (size_t i = 0; i < s.configs.size(); ++i) {
    const int k = static_cast<int>(i);
    ParameterShardingGenerator g;
    switch (type) {
      case ShardingType::DATA_PARALLEL: g = data_parallel(); break;
      case ShardingType::TABLE_WISE: g = table_wise(k % W); break;
      case ShardingType::COLUMN_WISE: {
        std::vector<int> ranks;
        for (int r = 0; r < std::min<int64_t>(W, s.o.dim); ++r) ranks.push_back(r);
        g = column_wise(ranks);
        break;
      }
      case ShardingType::TABLE_COLUMN_WISE: g = table_column_wise(k % G); break;
      case ShardingType::ROW_WISE: g = row_wise(); break;
      case ShardingType::TABLE_ROW_WISE: g = table_row_wise(k % G); break;
    }
    gens[s.configs[i].name] = g;
  }
  return construct_module_sharding_plan(s.shapes, gens, W, L);
}

std::string legend(const Setup& s, ShardingType type) {
  const int W = s.o.world_size, L = s.o.local_size;
  const int64_t n = std::min<int64_t>(W, s.o.dim), nl = std::min<int64_t>(L, s.o.dim);
  // Appended piece by piece: GCC 12 -O3 warns (-Wrestrict, falsely) on "literal" + std::string.
  std::string out;
  switch (type) {
    case ShardingType::DATA_PARALLEL: out = "every table whole on every rank"; break;
    case ShardingType::TABLE_WISE: out = "table i on rank i % W"; break;
    case ShardingType::COLUMN_WISE:
      out = std::to_string(n);
      out += " column shards per table, shard j on rank j";
      break;
    case ShardingType::TABLE_COLUMN_WISE:
      out = "table i in ";
      out += std::to_string(nl);
      out += " column shards on the ranks of node i % (W/L)";
      break;
    case ShardingType::ROW_WISE:
      out = std::to_string(W);
      out += " row blocks per table, block j on rank j";
      break;
    case ShardingType::TABLE_ROW_WISE:
      out = "table i in ";
      out += std::to_string(L);
      out += " row blocks on the ranks of node i % (W/L)";
      break;
  }
  return out;
}

// What one rank looks up per step for each batch: values (ids x shard columns) per rank, and
// the global batch's id count last. Every non-data-parallel shard sees the ids of all W*B
// samples that fall in its rows; a data_parallel table its own rank's B samples. Each rank counts
// the contributions of its own samples; one all_reduce adds them up.
std::vector<double> lookup_values(const Setup& s, const ModuleShardingPlan& plan,
                                  const KeyedJaggedTensor& kjt, const Group& world) {
  const int W = world.size(), me = world.rank();
  Tensor v = zeros({W + 1}, DType::Float64);
  double mine_ids = 0;
  std::vector<double> acc(static_cast<size_t>(W), 0.0);
  for (const auto& c : s.configs) {
    const ParameterSharding& ps = plan.at(c.name);
    for (const auto& f : c.feature_names) {
      const std::vector<int64_t> ids = kjt[f].values().to_vector<int64_t>();
      mine_ids += static_cast<double>(ids.size());
      if (ps.sharding_type == ShardingType::DATA_PARALLEL) {
        acc[static_cast<size_t>(me)] +=
            static_cast<double>(ids.size()) * static_cast<double>(c.embedding_dim);
        continue;
      }
      for (const ShardMetadata& m : ps.sharding_spec) {
        const int64_t lo = m.row_offset(), hi = lo + m.rows();
        const auto in =
            std::count_if(ids.begin(), ids.end(), [&](int64_t id) { return id >= lo && id < hi; });
        acc[static_cast<size_t>(m.placement)] +=
            static_cast<double>(in) * static_cast<double>(m.cols());
      }
    }
  }
  for (int r = 0; r < W; ++r) v.set_flat(r, acc[static_cast<size_t>(r)]);
  v.set_flat(W, mine_ids);
  all_reduce(v, world).wait();
  std::vector<double> out(static_cast<size_t>(W + 1));
  for (int r = 0; r <= W; ++r) out[static_cast<size_t>(r)] = v.get_flat(r);
  return out;
}

struct TypeResult {
  double input = 0, lookup = 0, output = 0, backward = 0, total = 0;  // seconds, medians
  double dp_step = 0;      // of backward: step_data_parallel (data_parallel only)
  double ids_per_s = 0;    // global ids per step / the slowest rank's total
  double lookup_rate = 0;  // per rank: looked-up values / dim / lookup time
  double max_err = 0;
  bool ok = true;
  double build_s = 0;
};

// One sharding type on every rank: build, a checked warm-up step, iters timed steps.
TypeResult run_type(const Setup& s, ShardingType type, const Group& world,
                    const std::vector<KeyedJaggedTensor>& batches, const UnshardedReference& ref) {
  const int W = world.size(), me = world.rank();
  const bool lead = me == 0;
  const int64_t B = s.o.batch, D = s.o.dim;
  TypeResult res;
  const std::string type_name(to_string(type));
  const char* name = type_name.c_str();
  double bytes = 0;
  for (int64_t r : s.rows) bytes += static_cast<double>(r * D * 4);
  if (type == ShardingType::DATA_PARALLEL) bytes *= W;
  if (lead) progress(s, "%s: building the sharded collection (%.2f GB of tables over %d ranks)",
                     name, bytes / 1e9, W);
  barrier(world).wait();
  const auto b0 = Clock::now();
  const ModuleShardingPlan plan = plan_for(s, type);
  FusedOptimizerConfig sgd;
  sgd.optimizer = EmbOptimType::Sgd;
  sgd.learning_rate = 1e-3;
  ShardedEmbeddingBagCollection sebc(s.configs, /*is_weighted=*/false, plan, world,
                                     {.local_size = s.o.local_size}, sgd, s.o.seed);
  barrier(world).wait();
  res.build_s = seconds(b0, Clock::now());
  if (lead) progress(s, "%s: built in %.1f s", name, res.build_s);

  std::vector<std::vector<double>> values;  // per batch: lookup_values
  for (const auto& kjt : batches) values.push_back(lookup_values(s, plan, kjt, world));
  int64_t cols = 0;
  for (int64_t d : sebc.length_per_key()) cols += d;
  const Tensor up = ones({B, cols}, DType::Float32);  // d(sum of the output) / d(output)
  const bool exact = type != ShardingType::ROW_WISE && type != ShardingType::TABLE_ROW_WISE;

  enum { kIn, kLookup, kOut, kBwd, kTotal, kDp, kErr, kBad, kRates };
  std::vector<std::vector<double>> stages(kRates);
  std::vector<double> rates, throughput;
  auto last_note = Clock::now();
  for (int step = 0; step <= s.o.iters; ++step) {
    const size_t bi = static_cast<size_t>(step) % batches.size();
    barrier(world).wait();
    const auto t0 = Clock::now();
    EmbeddingBagCollectionContext ctx;
    ShardedInputDistAwaitable in = sebc.input_dist(ctx, batches[bi]);
    auto feats = in.wait();
    const std::vector<KeyedJaggedTensor> dist = feats.wait();
    const auto t1 = Clock::now();
    LazyAwaitable<PooledEmbeddings> lazy = sebc.compute_and_output_dist(ctx, dist);
    const auto t2 = Clock::now();
    const PooledEmbeddings out = lazy.value();
    const auto t3 = Clock::now();
    double err = 0, bad = 0;
    if (step == 0) {
      const Tensor& y = out.values.value();
      const Tensor want = ref.pooled.narrow(0, me * B, B);
      if (y.shape() != want.shape() || y.dtype() != DType::Float32) {
        bad = 1;
        err = INFINITY;
      } else {
        err = static_cast<double>((y.matrix<float>() - want.matrix<float>()).cwiseAbs().maxCoeff());
        bad = (exact ? err != 0.0 : !(err <= 1e-5 * ref.max_abs)) ? 1 : 0;
      }
    }
    backward(out.values, up);
    const auto t_dp = Clock::now();
    if (type == ShardingType::DATA_PARALLEL) sebc.step_data_parallel();
    const auto t4 = Clock::now();

    const double my_lookup = seconds(t1, t2);
    Tensor m = zeros({kRates + W}, DType::Float64);
    const double t[] = {seconds(t0, t1), my_lookup, seconds(t2, t3), seconds(t3, t4),
                        seconds(t0, t4), seconds(t_dp, t4), err, bad};
    for (int k = 0; k < kRates; ++k) m.set_flat(k, t[k]);
    // Rates are >= 0, so the MAX of a vector holding only this rank's entry gathers them.
    m.set_flat(kRates + me,
               values[bi][static_cast<size_t>(me)] / static_cast<double>(D) / my_lookup);
    all_reduce(m, world, ReduceOp::Max).wait();
    if (step == 0) {
      res.max_err = m.get_flat(kErr);
      res.ok = m.get_flat(kBad) == 0;
      if (lead && !res.ok)
        std::fprintf(stderr, "%s: MISMATCH: the sharded forward differs from the unsharded "
                     "collection's by up to %g (largest output %g)\n", name, res.max_err,
                     ref.max_abs);
      continue;
    }
    for (int k = 0; k < kErr; ++k) stages[static_cast<size_t>(k)].push_back(m.get_flat(k));
    for (int r = 0; r < W; ++r)
      if (values[bi][static_cast<size_t>(r)] > 0) rates.push_back(m.get_flat(kRates + r));
    throughput.push_back(values[bi][static_cast<size_t>(W)] / m.get_flat(kTotal));
    if (lead && seconds(last_note, Clock::now()) > 5) {
      progress(s, "%s: step %d of %d", name, step, s.o.iters);
      last_note = Clock::now();
    }
  }
  res.input = median(stages[kIn]);
  res.lookup = median(stages[kLookup]);
  res.output = median(stages[kOut]);
  res.backward = median(stages[kBwd]);
  res.total = median(stages[kTotal]);
  res.dp_step = median(stages[kDp]);
  res.ids_per_s = median(throughput);
  res.lookup_rate = median(rates);
  return res;
}

// One rank's whole run: its batches, the reference, every sharding type; rank 0 prints.
void run_rank(const Setup& s, const SyntheticCriteo& data, int distinct, const Group& world,
              std::atomic<bool>& all_ok) {
  const Options& o = s.o;
  const int W = world.size(), me = world.rank();
  const int64_t B = o.batch;
  const bool lead = me == 0;
  if (lead)
    progress(s, "generating %d batches of %lld samples per rank", distinct,
             static_cast<long long>(B));
  std::vector<KeyedJaggedTensor> batches;
  for (int b = 0; b < distinct; ++b)
    batches.push_back(data.batch(Split::Train, (static_cast<int64_t>(b) * W + me) * B, B).sparse);
  if (lead) progress(s, "building the unsharded reference (each rank 1/%d of the tables)", W);
  // Global batch b (every rank's b-th batch, rank-major), for the reference's timing passes.
  std::vector<KeyedJaggedTensor> globals;
  for (int b = 0; b < std::min(distinct, 5); ++b)
    globals.push_back(data.batch(Split::Train, static_cast<int64_t>(b) * W * B, W * B).sparse);
  const UnshardedReference ref = unsharded_reference(s.configs, globals, o.seed, world);
  if (lead) {
    progress(s, "reference done");
    std::printf("ids per global step: %lld (first batch)\n",
                static_cast<long long>(globals[0].values().numel()));
    std::printf("single-core references, per rank with the ranks running concurrently, median "
                "over %zu global batches: Eigen gather-and-sum loop %.3e ids/s, unsharded lookup "
                "(no tape) %.3e ids/s\n",
                globals.size(), ref.eigen_ids_per_s, ref.lookup_ids_per_s);
    std::printf("times: medians over the timed steps of the slowest rank (ranks start each step "
                "at a barrier; one all_reduce MAX of the per-rank stage times); total is the "
                "slowest rank's own total\n\n");
    std::printf("%-18s %10s %10s %10s %10s %10s %12s %14s %8s  %s\n", "sharding", "input ms",
                "lookup ms", "output ms", "bwd ms", "total ms", "ids/s", "lookup ids/s/r",
                "/Eigen", "check (max |diff|)");
    std::fflush(stdout);
  }
  std::vector<std::string> legends;
  double dp_note = -1;
  for (ShardingType type : o.types) {
    const TypeResult r = run_type(s, type, world, batches, ref);
    if (!r.ok) all_ok = false;
    if (!lead) continue;
    const std::string name(to_string(type));
    std::printf("%-18s %10.2f %10.2f %10.2f %10.2f %10.2f %12.3e %14.3e %8.2f  %s (%.2g)\n",
                name.c_str(), r.input * 1e3, r.lookup * 1e3, r.output * 1e3, r.backward * 1e3,
                r.total * 1e3, r.ids_per_s, r.lookup_rate,
                ref.eigen_ids_per_s > 0 ? r.lookup_rate / ref.eigen_ids_per_s : 0.0,
                r.ok ? "ok" : "MISMATCH", r.max_err);
    std::fflush(stdout);
    legends.push_back(name + ": " + legend(s, type));
    if (type == ShardingType::DATA_PARALLEL) dp_note = r.dp_step;
  }
  if (lead) {
    std::printf("\nlayouts (W = %d, L = %d): ", W, o.local_size);
    for (size_t i = 0; i < legends.size(); ++i)
      std::printf("%s%s", i ? "; " : "", legends[i].c_str());
    std::printf("\nlookup ids/s/r: each rank's looked-up values / dim / its lookup time (median "
                "over ranks and steps; a column shard's id counts as its share of the dim)\n");
    if (dp_note >= 0)
      std::printf("data_parallel's backward includes step_data_parallel, %.2f ms (median): "
                  "the touched rows' average over the ranks (all-gathered rows, or an "
                  "all_reduce of a dense buffer for tables touched all over), then the SGD step "
                  "of the touched rows\n", dp_note * 1e3);
    std::printf("load average %s (1, 5, 15 min) at the end\n", load_average().c_str());
    progress(s, "done");
  }
}

}  // namespace

int run_sharded_step_bench(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 2;
  const Setup s = make_setup(o);
  const int W = o.world_size;
  const int distinct = std::min(o.iters + 1, 8);  // batches cycled through (step 0 is batch 0)

  SyntheticCriteoConfig dc;
  dc.num_dense = 0;
  dc.num_sparse = o.tables;
  dc.cardinalities = s.rows;
  dc.mean_pooling_factor = static_cast<double>(o.pooling);
  dc.max_pooling_factor = 4 * o.pooling;  // a cap the Poisson tail never reaches: the mean stays P
  dc.zipf_exponent = o.zipf;
  dc.num_train = static_cast<int64_t>(distinct) * W * o.batch;
  dc.num_test = 0;
  dc.seed = o.seed;
  const SyntheticCriteo data(dc);

  std::printf("load average %s (1, 5, 15 min) at the start\n", load_average().c_str());
  std::printf("ferry-embedding-bench --sharded: %d ranks (local transport, threads; %d per node), "
              "%lld tables of %lld..%lld rows (log-spaced) x %lld float32, one feature each, "
              "batch %lld per rank, pooling 1 + Poisson(%lld), power-law ids (zipf %.2f), "
              "fused SGD, %d timed steps after a checked warm-up step\n",
              W, o.local_size, static_cast<long long>(o.tables),
              static_cast<long long>(o.rows_min), static_cast<long long>(o.rows_max),
              static_cast<long long>(o.dim), static_cast<long long>(o.batch),
              static_cast<long long>(o.pooling - 1), o.zipf, o.iters);
  std::fflush(stdout);
  std::atomic<bool> all_ok{true};
  try {
    run_ranks(W, [&](Group& world) { run_rank(s, data, distinct, world, all_ok); });
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "ferry-embedding-bench --sharded: %s\n", e.what());
    return 1;
  }
  return all_ok ? 0 : 1;
}

}  // namespace ferry::embedding_bench
