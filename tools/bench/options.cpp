#include "tools/bench/options.h"

#include "tools/bench/codec_bench.h"
#include "tools/bench/torchrec_ops_bench.h"
#include "tools/bench/differentiable_case.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
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
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < min || value > max) {
    std::ostringstream os;
    os << flag << " expects an integer in " << min << ".." << max << ", given '" << text << "'";
    throw UsageError(os.str());
  }
  return value;
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
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string suffix = lower(text.substr(digits));
  size_t shift = 0;
  if (suffix.empty() || suffix == "b") {
    shift = 0;
  } else if (suffix == "k" || suffix == "kb" || suffix == "kib") {
    shift = 10;
  } else if (suffix == "m" || suffix == "mb" || suffix == "mib") {
    shift = 20;
  } else if (suffix == "g" || suffix == "gb" || suffix == "gib") {
    shift = 30;
  } else {
    digits = 0;  // reported below
  }
  size_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + digits, value);
  if (digits == 0 || ec != std::errc() || ptr != text.data() + digits ||
      value > (std::numeric_limits<size_t>::max() >> shift)) {
    throw UsageError(flag + " expects a byte count like 8, 64K, 1M or 2G (binary units), given '" +
                     text + "'");
  }
  return value << shift;
}

Options parse_options(int argc, char** argv) {
  Options o;
  bool ops_given = false;
  std::string codec_text;  // --codec, read once --op is known
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::optional<std::string> inline_value;
    if (arg.rfind("--", 0) == 0) {
      if (auto eq = arg.find('='); eq != std::string::npos) {
        inline_value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
      }
    } else if (arg.rfind("-n", 0) == 0 && arg.size() > 2) {  // -n4
      inline_value = arg.substr(2);
      arg = "-n";
    }
    auto value = [&]() -> std::string {
      if (inline_value) return *inline_value;
      if (i + 1 >= argc) throw UsageError(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      o.help = true;
    } else if (arg == "--op") {
      const std::string v = value();
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
    } else if (arg == "--codec") {
      codec_text = value();
    } else if (arg == "--features") {
      o.kjt_features = parse_int(arg, value(), 1, 1 << 20);
    } else if (arg == "--batch") {
      o.kjt_batch = parse_int(arg, value(), 1, 1 << 24);
    } else if (arg == "--pooling") {
      o.kjt_pooling = parse_int(arg, value(), 1, 1 << 16);
    } else if (arg == "--weighted") {
      o.kjt_weighted = true;
    } else if (arg == "--row-dim") {
      o.row_dim = parse_int(arg, value(), 1, 1 << 20);
    } else if (arg == "--sizes") {
      o.sizes.clear();
      for (const std::string& item : split_list(value())) o.sizes.push_back(parse_bytes(arg, item));
      if (o.sizes.empty()) throw UsageError("--sizes needs a comma list of byte counts");
    } else if (arg == "--transport") {
      o.transport = value();
    } else if (arg == "-n" || arg == "--world-size") {
      o.world_size = parse_int(arg, value(), 1, kMaxWorldSize);
    } else if (arg == "--dtype") {
      o.dtype = parse_dtype(value());
    } else if (arg == "--min-bytes" || arg == "-b") {
      o.min_bytes = parse_bytes(arg, value());
    } else if (arg == "--max-bytes" || arg == "-e") {
      o.max_bytes = parse_bytes(arg, value());
    } else if (arg == "--factor" || arg == "-f") {
      o.factor = parse_int(arg, value(), 2, 1 << 20);
    } else if (arg == "--iters") {
      const std::string v = value();
      o.iters = lower(v) == "auto" ? 0 : parse_int(arg, v, 1, 100'000'000);
    } else if (arg == "--warmup") {
      o.warmup = parse_int(arg, value(), 0, 100'000'000);
    } else if (arg == "--algo") {
      o.algo = value();
    } else if (arg == "--vs-mpi") {
      o.vs_mpi = true;
    } else if (arg == "--differentiable") {
      o.differentiable = true;
    } else if (arg == "--mpi-nonblocking") {
      o.mpi_nonblocking = true;
    } else if (arg == "--csv") {
      o.csv_path = value();
      if (o.csv_path.empty()) throw UsageError("--csv needs a file name");
    } else {
      throw UsageError("unknown argument '" + std::string(argv[i]) + "'");
    }
  }
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
  std::ostringstream os;
  os << "usage: ferry-bench [options]\n"
        "\n"
        "Measures ferry's collectives in the style of nccl-tests: for each size, the median\n"
        "time over iterations (an iteration's time is the slowest rank's), algbw = size / time\n"
        "and busbw = algbw * the op's bus factor. \"size\" is the per-rank buffer the op's count\n"
        "refers to: the tensor (all_reduce, broadcast, reduce), the output (all_gather), the\n"
        "input (reduce_scatter, all_to_all).\n"
        "\n"
        "  --op NAME[,NAME...]|all  all_reduce, all_gather, reduce_scatter, all_to_all,\n"
        "                           broadcast, reduce, memcpy (default all_reduce; all runs\n"
        "                           every op)\n"
        "  --op kjt_all_to_all      instead: torchrec's two-phase KJT all-to-all on a synthetic\n"
        "                           KJT (--features T, default 16; --batch B per rank, 1024;\n"
        "                           --pooling P mean ids per bag, power-law, 8; --weighted), per\n"
        "                           phase, against one all_to_all_single of the same bytes\n"
        "  --op torchrec|NAME[,...] instead: torchrec's comm ops (alltoall_pooled,\n"
        "                           variable_batch_alltoall_pooled, alltoall_sequence,\n"
        "                           reduce_scatter_pooled, reduce_scatter_base_pooled,\n"
        "                           reduce_scatter_v_pooled, all_gather_base_pooled), forward\n"
        "                           and forward + backward, against the raw collectives moving\n"
        "                           the same bytes and a memcpy of the input (size = float32\n"
        "                           input per rank); --codec none|fp16|bf16|fp8|int8\n"
        "  --op codec               instead: encode + decode throughput of the torchrec comm\n"
        "                           codecs on one core (size = float32 input bytes), next to\n"
        "                           memcpy of the same bytes; no ranks are started\n"
        "  --codec NAME[,NAME...]   with --op codec: fp16, bf16, fp8 (HFP8), fp8-rowwise, int8\n"
        "                           (default all)\n"
        "  --row-dim N              row dim of fp8-rowwise and int8 (default 32)\n"
        "  --transport NAME         local (threads in this process), mpi or ucx (one rank per\n"
        "                           process: mpiexec -n N ferry-bench --transport ucx; rank 0\n"
        "                           prints; ucx exchanges its addresses through MPI)\n"
        "                           (default local)\n"
        "  -n, --world-size N       ranks of the local transport (default 2); mpiexec's -n\n"
        "                           sets them for mpi and ucx\n"
        "  --vs-mpi                 (mpi, ucx) also time the blocking MPI call of the same op and\n"
        "                           size, alternating iterations with ferry's, and print\n"
        "                           its median, ferry/mpi and ferry - mpi\n"
        "  --mpi-nonblocking        with --vs-mpi: the baseline is the non-blocking call and\n"
        "                           MPI_Wait (the call ferry makes under MPI) instead\n"
        "  --differentiable         time forward + backward of the differentiable all_reduce\n"
        "                           and all_gather (default: both) against the raw forward\n"
        "                           and backward collectives on preallocated buffers\n"
        "                           (all_reduce + all_reduce, all_gather + reduce_scatter),\n"
        "                           alternating iterations; float32 or float64\n"
        "  --dtype NAME             float32, float64, float16, bfloat16, int32, int64, uint8\n"
        "                           (default float32)\n"
        "  -b, --min-bytes SIZE     smallest size (default 8); K, M, G suffixes are KiB, MiB, GiB\n"
        "  -e, --max-bytes SIZE     largest size (default 64M)\n"
        "  -f, --factor F           size multiplier between steps (default 4)\n"
        "  --sizes SIZE[,SIZE...]   exactly these sizes instead of the -b/-e/-f sweep\n"
        "  --iters N|auto           timed iterations per size (default auto: about "
     << kTargetSecondsPerSize << " s\n"
        "                           per size, at least "
     << kMinIters << ", at most " << kMaxIters
     << ")\n"
        "  --warmup N               untimed iterations per size (default 3)\n"
        "  --algo SPEC              algorithm override, e.g. all_reduce:ring,all_gather:direct\n"
        "                           (same syntax as FERRY_ALGO, which it replaces)\n"
        "  --csv FILE               also write the rows to FILE as CSV\n"
        "  -h, --help               this text\n"
        "\n"
        "Exit status: 0 on success, 1 when a result is wrong (\"check failed\") or the runtime\n"
        "fails, 2 for a bad command line.\n";
  return os.str();
}

}  // namespace ferry::bench
