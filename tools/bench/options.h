// Command line of ferry-bench (nccl-tests style flags).
#pragma once

#include "tools/bench/ops.h"
#include "tools/cli/args.h"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ferry::bench {

// A bad command line; main prints it and exits with status 2. The tools' shared one.
using UsageError = cli::UsageError;

struct Options {
  std::vector<OpKind> ops;  // in the order they run
  std::string transport = "local";
  int world_size = 2;
  DType dtype = DType::Float32;
  size_t min_bytes = 8;
  size_t max_bytes = size_t{64} << 20;
  int factor = 4;
  int iters = 0;  // 0: adaptive (see kTargetSecondsPerSize)
  int warmup = 3;
  std::string algo;      // --algo spec; empty: the runtime's automatic choice
  std::string csv_path;  // empty: no CSV
  std::string json_path;  // --json: empty: no JSON file
  // --place: the forms timed for the ops that have both (out-of-place, in-place); an op with
  // one form runs it whatever this says.
  bool out_of_place = true;
  bool in_place = true;
  // --memory: the collectives' rows with ordinary tensors, with tensors in shared memory
  // (empty_shared), or each size with both, private first.
  bool private_memory = true;
  bool shared_memory = false;
  // --test-corrupt N: after the timed iterations, N output elements on the last rank are
  // overwritten before #wrong counts them (tests the column; the run then exits 1).
  int64_t test_corrupt = 0;
  bool mpi_nonblocking = false;  // the --vs-mpi baseline is MPI_I<op> + MPI_Wait
  bool vs_mpi = false;   // time the raw MPI call of each op and size too (transport mpi)
  // Time forward + backward of the differentiable op against the raw forward + backward
  // collectives (all_reduce and all_gather only).
  bool differentiable = false;
  // --op codec: time the torchrec comm codecs on one core instead of collectives (no ranks).
  bool codec = false;
  std::vector<std::string> codecs;  // --codec; empty: all of codec_bench_names()
  int64_t row_dim = 32;             // --row-dim: rows of the row-wise codecs (fp8-rowwise, int8)
  std::vector<size_t> sizes;        // --sizes: replaces the -b/-e/-f sweep when not empty
  // --op kjt_all_to_all: the torchrec KJT all-to-all on a synthetic KJT (tools/bench/kjt_bench.h).
  bool kjt = false;
  int64_t kjt_features = 16;   // --features T
  int64_t kjt_batch = 1024;    // --batch B (per rank)
  double kjt_pooling = 8.0;    // --pooling P: mean ids per bag (power-law lengths)
  bool kjt_weighted = false;   // --weighted
  // --op alltoall_pooled,...: torchrec's comm ops (tools/bench/torchrec_ops_bench.h), forward and
  // forward + backward against the raw collectives; --codec one of none, fp16, bf16, fp8, int8.
  std::vector<std::string> torchrec_ops;
  std::string torchrec_codec = "none";
  // --grouped: each step's iterations run together instead of alternating within an iteration.
  bool torchrec_grouped = false;
};

// Adaptive iteration count: enough for about this long per size, within [kMinIters, kMaxIters].
inline constexpr double kTargetSecondsPerSize = 0.2;
inline constexpr int kMinIters = 5;
inline constexpr int kMaxIters = 1000;

// Throws UsageError naming the flag and what it expected; --help prints usage() and exits 0.
// Does not check that the transport is built in: make_launcher does, so the transport is decided
// in one place. nccl-tests' flag names are accepted where they mean the same thing (-b, -e, -f,
// -w, -d, --minbytes, --maxbytes, --stepfactor, --warmup_iters, --datatype, --iters); its -n
// (iterations) and -o (reduction op) are not, since ferry-bench's -n and --op came first.
Options parse_options(int argc, char** argv);

// The process count and this process's rank when a launcher (mpiexec, ferry-run) started this
// process as one rank of several; {1, 0} otherwise. Read from the launchers' environment.
struct LaunchedAs {
  int size = 1;
  int rank = 0;
  bool by_ferry_run = false;
};
LaunchedAs launched_as();

// "8", "64K", "1M", "2G", "1MiB" (binary units); throws UsageError.
size_t parse_bytes(const std::string& flag, const std::string& text);

// The per-rank sizes of a sweep: min, min*factor, ... up to max, and max itself when the
// geometric steps skip it (8 B .. 64 MiB by 4 would otherwise end at 32 MiB); --sizes instead
// when given.
std::vector<size_t> sweep_sizes(const Options& opts);

std::string usage();

// "512 B", "4 KiB", "1.5 MiB".
std::string bytes_str(size_t bytes);

}  // namespace ferry::bench
