#include "tools/bench/options.h"

#include "tools/bench/codec_bench.h"
#include "tools/bench/torchrec_ops_bench.h"
#include "tools/bench/differentiable_case.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>

namespace ferry::bench {
namespace {

constexpr int kMaxWorldSize = 1024;  // one thread per rank: beyond this it is a typo, not a test

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

int parse_int(const std::string& flag, const std::string& text, int min, int max) {
  return static_cast<int>(cli::parse_int(flag, text, min, max));
}

std::vector<OpKind> parse_ops(const std::string& text) {
  std::vector<OpKind> ops;
  auto add = [&](OpKind op) {
    if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
  };
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (lower(item) == "codec") {
      throw UsageError("--op codec runs alone: it times the codecs on one core, without ranks");
    } else if (lower(item) == "all") {
      for (OpKind op : all_ops()) add(op);
    } else if (auto op = op_from_name(item)) {
      add(*op);
    } else {
      throw UsageError("--op: unknown op '" + item + "'; expected all or a comma list of " +
                       op_names());
    }
  }
  if (ops.empty()) throw UsageError("--op: no op given; expected all or one of " + op_names());
  return ops;
}

DType parse_dtype(const std::string& text) {
  try {
    return dtype_from_name(text);
  } catch (const InvalidArgument&) {
    std::string valid;
    for (DType t : kAllDTypes) valid += std::string(valid.empty() ? "" : ", ") + dtype_name(t);
    throw UsageError("--dtype: unknown dtype '" + text + "'; expected one of " + valid);
  }
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) items.push_back(item);
  return items;
}

// A comma list of torchrec op names (not mixed with raw collectives: they have other tables).
std::vector<std::string> parse_torchrec_ops(const std::string& text) {
  std::vector<std::string> ops;
  for (const std::string& item : split_list(text)) {
    if (!is_torchrec_op(item)) {
      std::string valid;
      for (const std::string& n : torchrec_op_names()) valid += (valid.empty() ? "" : ", ") + n;
      throw UsageError("--op: '" + item + "' is not a torchrec op (torchrec ops run alone, "
                       "not with raw collectives); expected torchrec or a comma list of " + valid);
    }
    if (std::find(ops.begin(), ops.end(), item) == ops.end()) ops.push_back(item);
  }
  return ops;
}

std::vector<std::string> parse_codecs(const std::string& text) {
  const std::vector<std::string>& valid = codec_bench_names();
  std::vector<std::string> codecs;
  for (const std::string& item : split_list(lower(text))) {
    if (item == "all") {
      codecs = valid;
    } else if (std::find(valid.begin(), valid.end(), item) != valid.end()) {
      if (std::find(codecs.begin(), codecs.end(), item) == codecs.end()) codecs.push_back(item);
    } else {
      std::string names;
      for (const std::string& n : valid) names += (names.empty() ? "" : ", ") + n;
      throw UsageError("--codec: unknown codec '" + item + "'; expected all or a comma list of " +
                       names);
    }
  }
  if (codecs.empty()) throw UsageError("--codec: no codec given");
  return codecs;
}

}  // namespace

size_t parse_bytes(const std::string& flag, const std::string& text) {
  return cli::parse_bytes(flag, text);
}

namespace {

// The flags and their help; the same parser reads the command line and writes --help.
cli::Parser make_parser(Options& o, bool& ops_given, std::string& codec_text) {
  std::ostringstream iters_help;
  iters_help << "timed iterations per size (default auto: about " << kTargetSecondsPerSize
             << " s per size,\nat least " << kMinIters << ", at most " << kMaxIters << ")";
  cli::Parser p(
      "ferry-bench", "[options]",
      "Measures ferry's collectives in the style of nccl-tests: for each size, the median\n"
      "time over iterations (an iteration's time is the slowest rank's), algbw = size / time\n"
      "and busbw = algbw * the op's bus factor. \"size\" is the per-rank buffer the op's count\n"
      "refers to: the tensor (all_reduce, broadcast, reduce), the output (all_gather), the\n"
      "input (reduce_scatter, all_to_all).");
  p.option("--op", "NAME[,NAME...]|all",
           "all_reduce, all_gather, reduce_scatter, all_to_all, broadcast,\n"
           "reduce, memcpy (default all_reduce; all runs every op);\n"
           "kjt_all_to_all instead: torchrec's two-phase KJT all-to-all on\n"
           "a synthetic KJT (--features T, default 16; --batch B per rank,\n"
           "1024; --pooling P mean ids per bag, power-law, 8; --weighted),\n"
           "per phase, against one all_to_all_single of the same bytes;\n"
           "torchrec or alltoall_pooled, variable_batch_alltoall_pooled,\n"
           "alltoall_sequence, reduce_scatter_pooled,\n"
           "reduce_scatter_base_pooled, reduce_scatter_v_pooled,\n"
           "all_gather_base_pooled instead: torchrec's comm ops, forward and\n"
           "forward + backward, against the raw collectives moving the same\n"
           "bytes and a memcpy of the input (size = float32 input per rank);\n"
           "codec instead: encode + decode throughput of the torchrec comm\n"
           "codecs on one core (size = float32 input bytes), next to memcpy\n"
           "of the same bytes; no ranks are started",
           [&](const std::string& v) {
             if (lower(v) == "codec")
               o.codec = true;
             else if (lower(v) == "kjt_all_to_all")
               o.kjt = true;
             else if (lower(v) == "torchrec")
               o.torchrec_ops = torchrec_op_names();
             else if (!split_list(v).empty() && is_torchrec_op(split_list(v)[0]))
               o.torchrec_ops = parse_torchrec_ops(v);
             else
               o.ops = parse_ops(v);
             ops_given = true;
           })
      .option("--codec", "NAME[,NAME...]",
              "with --op codec: fp16, bf16, fp8 (HFP8), fp8-rowwise, int8\n"
              "(default all); with torchrec ops: none|fp16|bf16|fp8|int8",
              [&](const std::string& v) { codec_text = v; })
      .option("--row-dim", "N", "row dim of fp8-rowwise and int8 (default 32)",
              [&](const std::string& v) { o.row_dim = parse_int("--row-dim", v, 1, 1 << 20); })
      .option("--features", "T", "--op kjt_all_to_all: features (default 16)",
              [&](const std::string& v) {
                o.kjt_features = parse_int("--features", v, 1, 1 << 20);
              })
      .option("--batch", "B", "--op kjt_all_to_all: bags per feature and rank (default 1024)",
              [&](const std::string& v) { o.kjt_batch = parse_int("--batch", v, 1, 1 << 24); })
      .option("--pooling", "P", "--op kjt_all_to_all: mean ids per bag (default 8)",
              [&](const std::string& v) { o.kjt_pooling = parse_int("--pooling", v, 1, 1 << 16); })
      .flag("--weighted", "--op kjt_all_to_all: with per-id weights",
            [&] { o.kjt_weighted = true; })
      .flag("--grouped",
            "torchrec ops: time each step (op, raw, op fwd+bwd, raw fwd+bwd,\n"
            "memcpy) in a block of its own instead of alternating them in\n"
            "every iteration: no step evicts another's buffers from the\n"
            "cache, but host drift no longer affects all steps alike",
            [&] { o.torchrec_grouped = true; })
      .option("--transport", "NAME",
              "local (threads in this process), mpi or ucx (one rank per\n"
              "process: mpiexec -n N ferry-bench --transport ucx; rank 0\n"
              "prints; ucx exchanges its addresses through MPI) (default local)",
              [&](const std::string& v) { o.transport = v; })
      .option("-n, --world-size", "N",
              "ranks of the local transport (default 2); mpiexec's -n sets\n"
              "them for mpi and ucx",
              [&](const std::string& v) {
                o.world_size = parse_int("--world-size", v, 1, kMaxWorldSize);
              })
      .flag("--vs-mpi",
            "(mpi, ucx) also time the blocking MPI call of the same op and\n"
            "size, alternating iterations with ferry's, and print its median,\n"
            "ferry/mpi and ferry - mpi",
            [&] { o.vs_mpi = true; })
      .flag("--mpi-nonblocking",
            "with --vs-mpi: the baseline is the non-blocking call and\n"
            "MPI_Wait (the call ferry makes under MPI) instead",
            [&] { o.mpi_nonblocking = true; })
      .flag("--differentiable",
            "time forward + backward of the differentiable all_reduce and\n"
            "all_gather (default: both) against the raw forward and backward\n"
            "collectives on preallocated buffers (all_reduce + all_reduce,\n"
            "all_gather + reduce_scatter), alternating iterations; float32\n"
            "or float64",
            [&] { o.differentiable = true; })
      .option("-d, --dtype, --datatype", "NAME",
              "float32, float64, float16, bfloat16, int32, int64, uint8\n"
              "(default float32)",
              [&](const std::string& v) { o.dtype = parse_dtype(v); })
      .option("-b, --min-bytes, --minbytes", "SIZE",
              "smallest size (default 8); K, M, G suffixes are KiB, MiB, GiB",
              [&](const std::string& v) { o.min_bytes = parse_bytes("--min-bytes", v); })
      .option("-e, --max-bytes, --maxbytes", "SIZE", "largest size (default 64M)",
              [&](const std::string& v) { o.max_bytes = parse_bytes("--max-bytes", v); })
      .option("-f, --factor, --stepfactor", "F", "size multiplier between steps (default 4)",
              [&](const std::string& v) { o.factor = parse_int("--factor", v, 2, 1 << 20); })
      .option("--sizes", "SIZE[,SIZE...]", "exactly these sizes instead of the -b/-e/-f sweep",
              [&](const std::string& v) {
                o.sizes.clear();
                for (const std::string& item : split_list(v))
                  o.sizes.push_back(parse_bytes("--sizes", item));
                if (o.sizes.empty()) throw UsageError("--sizes needs a comma list of byte counts");
              })
      .option("--iters", "N|auto", iters_help.str(),
              [&](const std::string& v) {
                o.iters = lower(v) == "auto" ? 0 : parse_int("--iters", v, 1, 100'000'000);
              })
      .option("-w, --warmup, --warmup_iters", "N", "untimed iterations per size (default 3)",
              [&](const std::string& v) { o.warmup = parse_int("--warmup", v, 0, 100'000'000); })
      .option("--algo", "SPEC",
              "algorithm override, e.g. all_reduce:ring,all_gather:direct\n"
              "(same syntax as FERRY_ALGO, which it replaces)",
              [&](const std::string& v) { o.algo = v; })
      .option("--csv", "FILE", "also write the rows to FILE as CSV", [&](const std::string& v) {
        if (v.empty()) throw UsageError("--csv needs a file name");
        o.csv_path = v;
      })
      .option("--json", "FILE",
              "also write FILE as JSON: version, host, settings and every\n"
              "row (tools/plot_bench.py draws it)",
              [&](const std::string& v) {
                if (v.empty()) throw UsageError("--json needs a file name");
                o.json_path = v;
              })
      .option("--place", "out|in|both",
              "which forms to time for the ops that have both: out of place,\n"
              "in place (all_reduce: output is input; all_gather, reduce_scatter:\n"
              "this rank's block; reduce: on the root) (default both, as\n"
              "nccl-tests); broadcast is in place only, all_to_all out of place",
              [&](const std::string& v) {
                const std::string p = lower(v);
                if (p != "out" && p != "in" && p != "both")
                  throw UsageError("--place: expected out, in or both, given '" + v + "'");
                o.out_of_place = p != "in";
                o.in_place = p != "out";
              })
      .option("--memory", "private|shared|both",
              "where the collectives' tensors lie: ordinary storage (default),\n"
              "shared memory (empty_shared: on one host the shared-memory path\n"
              "reads peers' tensors where they lie), or a row of each per size;\n"
              "a shared row's algorithm reads e.g. shm+shared",
              [&](const std::string& v) {
                const std::string m = lower(v);
                if (m != "private" && m != "shared" && m != "both")
                  throw UsageError("--memory: expected private, shared or both, given '" + v +
                                   "'");
                o.private_memory = m != "shared";
                o.shared_memory = m != "private";
              })
      .option("--test-corrupt", "N",
              "(testing the #wrong column) overwrite N output elements on the\n"
              "last rank after the timed iterations, before they are counted",
              [&](const std::string& v) {
                o.test_corrupt = cli::parse_int("--test-corrupt", v, 0, int64_t{1} << 40);
              })
      .epilog("ideal(us), x_ideal: the time the op's bytes need at the copy bandwidth measured\n"
              "at the start of the run (every rank copying 64 MiB at once, per rank), and time\n"
              "/ that; the bandwidth is measured again at the end and printed with its ratio to\n"
              "the start's (it drifts, and every x_ideal with it). The bytes are what one rank\n"
              "must read plus write, / 2 (a memcpy reads and writes each byte), every input\n"
              "read once where it lies and every output written once, the work split evenly;\n"
              "S = size, W ranks: all_reduce, all_to_all S; reduce_scatter, reduce (S + S/W)/2;\n"
              "all_gather (S/W + S)/2 out of place, S/2 in place; broadcast S/2; barrier none.\n"
              "x_now: the same against the copy bandwidth measured again just before the row's\n"
              "size, from 1 MiB up (the rate of that moment: it drifts within a run).\n"
              "Also in --csv and --json (ideal_us, x_ideal, x_now).\n"
              "#wrong: after the timed iterations the inputs are written again, the outputs\n"
              "cleared, the op run once more and every output element compared with the\n"
              "expected result, summed over ranks (nccl-tests' column).\n"
              "Exit status: 0 on success, 1 when a result is wrong (\"check failed\" or\n"
              "#wrong > 0) or the runtime fails, 2 for a bad command line.");
  return p;
}

}  // namespace

Options parse_options(int argc, char** argv) {
  Options o;
  bool ops_given = false;
  std::string codec_text;  // --codec, read once --op is known
  make_parser(o, ops_given, codec_text).parse(argc, argv);
  if (!codec_text.empty()) {
    if (o.codec) {
      o.codecs = parse_codecs(codec_text);
    } else if (!o.torchrec_ops.empty()) {
      const auto& valid = torchrec_op_codec_names();
      if (std::find(valid.begin(), valid.end(), codec_text) == valid.end())
        throw UsageError("--codec with torchrec ops: one of none, fp16, bf16, fp8, int8; given '" +
                         codec_text + "'");
      o.torchrec_codec = codec_text;
    } else {
      throw UsageError("--codec needs --op codec or torchrec ops (--op alltoall_pooled,...)");
    }
  }
  if (!o.torchrec_ops.empty() && (o.vs_mpi || o.differentiable))
    throw UsageError("torchrec ops have their own baseline (the raw collectives); they exclude "
                     "--vs-mpi and --differentiable");
  if (o.codec) {
    if (o.vs_mpi || o.differentiable)
      throw UsageError("--op codec times the codecs alone; it excludes --vs-mpi and "
                       "--differentiable");
    if (o.codecs.empty()) o.codecs = codec_bench_names();
  }
  if (!o.json_path.empty() && (o.codec || o.kjt || !o.torchrec_ops.empty()))
    throw UsageError("--json writes the collectives' table; --op codec, kjt_all_to_all and the "
                     "torchrec ops have tables of their own (use --csv there)");
  if (o.mpi_nonblocking && !o.vs_mpi) throw UsageError("--mpi-nonblocking needs --vs-mpi");
  if (o.vs_mpi && o.transport != "mpi" && o.transport != "ucx")
    throw UsageError("--vs-mpi compares with raw MPI calls and needs --transport mpi or ucx "
                     "(under mpiexec)");
  if (!ops_given) o.ops = {OpKind::AllReduce};  // nccl-tests' all_reduce_perf is the usual ask
  if (o.differentiable) {
    if (o.vs_mpi) throw UsageError("--differentiable has its own baseline and excludes --vs-mpi");
    if (o.dtype != DType::Float32 && o.dtype != DType::Float64)
      throw UsageError(std::string("--differentiable needs --dtype float32 or float64, given ") +
                       dtype_name(o.dtype));
    if (!ops_given) o.ops = {OpKind::AllReduce, OpKind::AllGather};
    for (OpKind op : o.ops) {
      if (!has_differentiable_form(op))
        throw UsageError(std::string("--differentiable times all_reduce and all_gather, not ") +
                         op_name(op));
    }
  }
  if (o.min_bytes > o.max_bytes) {
    throw UsageError("--min-bytes (" + bytes_str(o.min_bytes) + ") is larger than --max-bytes (" +
                     bytes_str(o.max_bytes) + ")");
  }
  return o;
}

std::vector<size_t> sweep_sizes(const Options& o) {
  if (!o.sizes.empty()) return o.sizes;
  std::vector<size_t> sizes;
  size_t s = o.min_bytes;
  while (s <= o.max_bytes) {
    sizes.push_back(s);
    if (s == 0) {
      s = 1;  // 0 * factor would never grow
      continue;
    }
    if (s > o.max_bytes / static_cast<size_t>(o.factor)) break;
    s *= static_cast<size_t>(o.factor);
  }
  if (sizes.empty() || sizes.back() != o.max_bytes) sizes.push_back(o.max_bytes);
  return sizes;
}

std::string bytes_str(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (v == static_cast<double>(static_cast<int64_t>(v)))
    std::snprintf(buf, sizeof buf, "%lld %s", static_cast<long long>(v), units[u]);
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

std::string usage() {
  Options o;
  bool ops_given = false;
  std::string codec_text;
  return make_parser(o, ops_given, codec_text).help();
}

LaunchedAs launched_as() {
  auto number = [](const char* name) -> int {
    const char* v = std::getenv(name);
    if (v == nullptr) return -1;
    int value = -1;
    const char* end = v + std::strlen(v);
    auto [ptr, ec] = std::from_chars(v, end, value);
    return ec == std::errc() && ptr == end ? value : -1;
  };
  // Hydra (MPICH) sets PMI_SIZE / PMI_RANK, Open MPI OMPI_COMM_WORLD_*, PMIx launchers
  // PMIX_RANK only, ferry-run FERRY_WORLD_SIZE / FERRY_RANK.
  const std::pair<const char*, const char*> launchers[] = {
      {"PMI_SIZE", "PMI_RANK"},
      {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
      {"FERRY_WORLD_SIZE", "FERRY_RANK"}};
  for (const auto& [size_name, rank_name] : launchers) {
    const int size = number(size_name);
    if (size > 1) {
      return LaunchedAs{size, std::max(number(rank_name), 0),
                        std::strcmp(size_name, "FERRY_WORLD_SIZE") == 0};
    }
  }
  if (number("PMIX_RANK") >= 0) return LaunchedAs{2, number("PMIX_RANK"), false};
  return LaunchedAs{};
}

}  // namespace ferry::bench
