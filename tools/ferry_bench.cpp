// ferry-bench: time, algbw and busbw of ferry's collectives over a sweep of sizes, with the
// conventions of nccl-tests so the numbers can be put next to NCCL's and MPI's.
//
// One launch of the ranks serves the whole sweep (thread start-up and world set-up stay out of
// the numbers); tensors are allocated per size. Each iteration starts with a barrier and every
// rank times its own op(...).wait(); the iteration's time is the slowest rank's, as a user
// waiting for the step to finish would see it. Ops with an in-place form get a row for each
// form; after a row's timed iterations one more checked run gives nccl-tests' #wrong.
#include <ferry/ferry.h>
#include <ferry/collectives/engine/group_impl.h>
#include "tools/bench/codec_bench.h"
#include "tools/bench/kjt_bench.h"
#include "tools/bench/differentiable_case.h"
#include "tools/bench/json_report.h"
#include "tools/bench/launcher.h"
#include "tools/bench/ops.h"
#include "tools/bench/options.h"
#include "tools/bench/report.h"
#include "tools/bench/torchrec_ops_bench.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ferry::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

int adaptive_iters(double seconds_per_iter) {
  if (!(seconds_per_iter > 0)) return kMaxIters;
  const double n = std::ceil(kTargetSecondsPerSize / seconds_per_iter);
  return static_cast<int>(std::clamp(n, double{kMinIters}, double{kMaxIters}));
}

// The iterations run before the timed ones. Without a fixed --iters at least one is needed to
// estimate how many iterations fit in the time budget.
int calibration_iters(const Options& o) { return o.iters == 0 ? std::max(o.warmup, 1) : o.warmup; }

struct Samples {
  std::vector<double> ferry;
  std::vector<double> baseline;  // empty without a baseline
};

// With a baseline, its iterations alternate with ferry's: the host's drift (the two vCPUs move)
// then affects both alike, and their ratio is what the run measures.
Samples time_iterations(const std::function<void()>& step, Baseline* baseline, const Group& group,
                        int n) {
  Samples s;
  s.ferry.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    // Start together, so the slowest rank's time is the op's and not how late it arrived.
    barrier(group).wait();
    const auto t0 = SteadyClock::now();
    step();
    s.ferry.push_back(std::chrono::duration<double>(SteadyClock::now() - t0).count());
    if (baseline) {
      baseline->barrier();
      const auto t1 = SteadyClock::now();
      baseline->run();
      s.baseline.push_back(std::chrono::duration<double>(SteadyClock::now() - t1).count());
    }
  }
  return s;
}

void report_check_failure(const std::string& what) {
  // One fprintf per line: ranks are threads and may fail together.
  std::fprintf(stderr, "ferry-bench: check failed: %s\n", what.c_str());
}

struct Sweep {
  const Options& opts;
  std::vector<size_t> sizes;
  Report* report;  // on the reporting rank only, null elsewhere
  Launcher* launcher;
};

// #wrong over every rank, on every rank: each rank puts its count in its own slot.
int64_t wrong_over_ranks(int64_t mine, const Group& world, RankSync& sync) {
  std::vector<double> slots(static_cast<size_t>(world.size()), 0.0);
  slots[static_cast<size_t>(world.rank())] = static_cast<double>(mine);
  int64_t total = 0;
  for (double v : sync.max_over_ranks(slots)) total += static_cast<int64_t>(v);
  return total;
}

// The forms of `op` this run times (--place), out-of-place first.
std::vector<Place> places_to_time(OpKind op, const Options& o) {
  if (o.differentiable) return {Place::OutOfPlace};
  std::vector<Place> out;
  const std::vector<Place> forms = places_of(op);
  for (Place p : forms) {
    const bool wanted = p == Place::InPlace ? o.in_place : o.out_of_place;
    if (wanted || forms.size() == 1) out.push_back(p);
  }
  return out;
}

// Where the rows' tensors lie (--memory), private first. --differentiable allocates its own.
std::vector<Memory> memories_to_time(const Options& o) {
  if (o.differentiable) return {Memory::Private};
  std::vector<Memory> out;
  if (o.private_memory) out.push_back(Memory::Private);
  if (o.shared_memory) out.push_back(Memory::Shared);
  return out;
}

// One row: one op, size, form and memory. Every rank returns the same: false when any rank's result
// was wrong before timing (the sweep stops there); #wrong after timing goes into the row.
bool bench_case(OpKind op, int64_t count, Place place, Memory memory, const Sweep& sweep,
                Group& world, RankSync& sync) {
  const Options& o = sweep.opts;
  const int w = world.size();
  // Checked once per size, before timing: a runtime that returns early or moves the wrong
  // bytes must not get to report a fast time.
  std::optional<OpCase> op_case;
  std::optional<DifferentiableCase> diff_case;
  std::function<void()> step;
  std::unique_ptr<Baseline> baseline;
  std::string error;
  if (o.differentiable) {
    diff_case.emplace(op, count, o.dtype, world);
    diff_case->run_autograd(/*keep=*/true);
    diff_case->run_raw();
    error = diff_case->check();
    step = [&] { diff_case->run_autograd(); };
    baseline = diff_case->raw_baseline();
  } else {
    op_case.emplace(op, count, o.dtype, world, place, memory);
    op_case->launch().wait();
    error = op_case->check();
    step = [&] { op_case->launch().wait(); };
    // MPI's own call is timed out of place only: one baseline per size is enough for the ratio.
    if (o.vs_mpi && place == Place::OutOfPlace)
      baseline = sweep.launcher->baseline(op, count, o.dtype, o.mpi_nonblocking);
  }
  if (!error.empty()) report_check_failure(error);
  if (!sync.all_of(error.empty())) return false;

  int iters = o.iters;
  const Samples warm = time_iterations(step, baseline.get(), world, calibration_iters(o));
  if (iters == 0) {
    // Both sides get the same count, from the slower of the two.
    std::vector<double> medians{summarize(warm.ferry).median};
    if (baseline) medians.push_back(summarize(warm.baseline).median);
    const std::vector<double> slowest = sync.max_over_ranks(medians);
    iters = adaptive_iters(*std::max_element(slowest.begin(), slowest.end()));
  }
  const Samples timed = time_iterations(step, baseline.get(), world, iters);
  const std::vector<double> slowest = sync.max_over_ranks(timed.ferry);
  std::optional<Stats> baseline_stats;
  if (baseline) baseline_stats = summarize(sync.max_over_ranks(timed.baseline));

  // nccl-tests' #wrong: a fresh run after the timed ones, every element compared. It also
  // says which algorithm ran (the group's run counts), which may differ from the table's
  // choice: a way that does not fit falls to the next, shm above its slots to another path.
  int64_t wrong = -1;
  std::string ran;
  if (op_case) {
    op_case->reset();
    barrier(world).wait();  // no rank's reset may overwrite what a faster peer already sent
    const std::optional<Collective> c = collective_of(op);
    std::array<uint64_t, kAlgorithmCount> before{};
    for (size_t a = 0; c && a < kAlgorithmCount; ++a)
      before[a] = world.impl().runs(*c, static_cast<Algorithm>(a));
    op_case->launch().wait();
    for (size_t a = 0; c && a < kAlgorithmCount; ++a)
      if (world.impl().runs(*c, static_cast<Algorithm>(a)) > before[a])
        ran = algorithm_name(static_cast<Algorithm>(a));
    // The last rank, except for reduce, whose result only the root holds.
    const int victim = op == OpKind::Reduce ? kRoot : w - 1;
    if (o.test_corrupt > 0 && world.rank() == victim) op_case->corrupt_for_test(o.test_corrupt);
    wrong = wrong_over_ranks(op_case->count_wrong(), world, sync);
  }

  if (sweep.report) {
    // MPI has collectives of its own: the table's automatic choice there is one of its ways.
    const std::string algorithm =
        (!ran.empty() ? ran
                      : algorithm_for(op, count, o.dtype, w, o.transport == "mpi",
                                      placement_of(world.host_layout()))) +
        (memory == Memory::Shared ? "+shared" : "");
    Row row{op, static_cast<size_t>(count) * dtype_size(o.dtype), count, algorithm, iters,
            summarize(slowest), 0, 0, baseline_stats, place, wrong};
    set_bandwidth(row, w);
    sweep.report->row(row);
  }
  return true;
}

// The copy bandwidths behind the rows' ideal_us, both medians of a few copies of
// kIdealCopyBytes: every rank copying its own buffer at once, the rate a collective's ranks
// each get while they all move bytes, as they do in every op, and, for comparison, rank 0
// copying alone while the others wait (0 elsewhere). Where the ranks share a host (and so its
// clock), a copy's time runs from the first rank's start to the last rank's end: with more
// ranks than cores the ranks take turns, and a rank that times only its own copy, run at a
// whole core's speed while the others wait, would count its turn as the rate each gets (at 4
// ranks on 2 cores such runs measured 8.2 GB/s per rank where the others measured 3.8-4.7). On
// several hosts each copy's time is the slowest rank's own. Without `alone`, only the first.
CopyBandwidth copy_bandwidth(const Group& world, RankSync& sync, bool alone = true) {
  constexpr int kCopies = 5;
  CopyBandwidth bw;
  MemcpyCase copy(kIdealCopyBytes);
  copy.time_one_seconds();  // the pages' first touch by the copy itself
  auto rate = [](const std::vector<double>& seconds) {
    const double median = summarize(seconds).median;
    return median > 0 ? static_cast<double>(kIdealCopyBytes) / median : 0;
  };
  auto seconds_now = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  const HostLayout hosts = world.host_layout();
  const bool one_host = !hosts.known || hosts.hosts.size() <= 1;
  // Per copy: this rank's own time, and its start (negated: the maximum over ranks of the
  // negated starts is the first start) and end on the host's clock.
  std::vector<double> own(kCopies), starts_negated(kCopies), ends(kCopies);
  for (int i = 0; i < kCopies; ++i) {
    sync.all_of(true);
    const double start = seconds_now();
    own[static_cast<size_t>(i)] = copy.time_one_seconds();
    ends[static_cast<size_t>(i)] = seconds_now();
    starts_negated[static_cast<size_t>(i)] = -start;
  }
  std::vector<double> together;
  if (one_host) {
    const std::vector<double> first = sync.max_over_ranks(starts_negated);
    const std::vector<double> last = sync.max_over_ranks(ends);
    for (size_t i = 0; i < last.size(); ++i) together.push_back(last[i] + first[i]);
  } else {
    together = sync.max_over_ranks(own);
  }
  bw.together = rate(together);
  if (alone && world.rank() == 0) {
    std::vector<double> seconds;
    for (int i = 0; i < kCopies; ++i) seconds.push_back(copy.time_one_seconds());
    bw.alone = rate(seconds);
  }
  sync.all_of(true);
  return bw;
}

// Every rank returns the same: false when any rank's result was wrong.
bool bench_collective(OpKind op, const Sweep& sweep, Group& world, RankSync& sync) {
  const Options& o = sweep.opts;
  if (sweep.report) sweep.report->begin_op(op);
  int64_t previous_count = -1;
  for (size_t bytes : sweep.sizes) {
    const int64_t count = element_count(op, bytes, o.dtype, world.size());
    if (count == previous_count) continue;  // rounding down made it the previous size again
    previous_count = count;
    // The rate of this moment for the size's x_now (every rank decides alike: it copies too).
    const bool now = !o.differentiable && op != OpKind::Barrier && bytes >= kNowFromBytes;
    const CopyBandwidth rate = now ? copy_bandwidth(world, sync, /*alone=*/false) : CopyBandwidth{};
    if (sweep.report) sweep.report->set_copy_now(rate);
    for (Place place : places_to_time(op, o))
      for (Memory memory : memories_to_time(o))
        if (!bench_case(op, count, place, memory, sweep, world, sync)) return false;
  }
  if (sweep.report) sweep.report->end_op();
  return true;
}

// The machine's copy bandwidth, as a yardstick for the collectives: rank 0 copies while the
// others wait, so they do not compete with it for the cores. The ranks meet after every size
// rather than once at the end, so no wait comes near its deadline however long the sweep is.
bool bench_memcpy(const Sweep& sweep, Group& world, RankSync& sync) {
  const Options& o = sweep.opts;
  const bool measuring = world.rank() == 0;
  if (sweep.report) sweep.report->begin_op(OpKind::Memcpy);
  int64_t previous_count = -1;
  for (size_t size : sweep.sizes) {
    const int64_t count = element_count(OpKind::Memcpy, size, o.dtype, world.size());
    if (count == previous_count) continue;
    previous_count = count;
    std::string error;
    if (measuring) {
      const size_t bytes = static_cast<size_t>(count) * dtype_size(o.dtype);
      MemcpyCase copy(bytes);
      copy.time_one_seconds();
      error = copy.check();
      if (error.empty()) {
        std::vector<double> warm;
        for (int i = 0; i < calibration_iters(o); ++i) warm.push_back(copy.time_one_seconds());
        const int iters = o.iters != 0 ? o.iters : adaptive_iters(summarize(warm).median);
        std::vector<double> seconds;
        seconds.reserve(static_cast<size_t>(iters));
        for (int i = 0; i < iters; ++i) seconds.push_back(copy.time_one_seconds());
        const int64_t wrong = copy.count_wrong();
        if (sweep.report) {
          Row row{OpKind::Memcpy, bytes, count, "memcpy", iters, summarize(seconds), 0, 0, {},
                  Place::OutOfPlace, wrong};
          set_bandwidth(row, world.size());
          sweep.report->row(row);
        }
      } else {
        report_check_failure(error);
      }
    }
    if (!sync.all_of(error.empty())) return false;
  }
  if (sweep.report) sweep.report->end_op();
  return true;
}

std::string sizes_str(const Options& o, const std::vector<size_t>& sizes) {
  return bytes_str(o.min_bytes) + " .. " + bytes_str(o.max_bytes) + " by x" +
         std::to_string(o.factor) + " (" + std::to_string(sizes.size()) + " sizes)";
}

std::string iters_str(const Options& o) {
  char buf[128];
  if (o.iters == 0)
    std::snprintf(buf, sizeof buf, "auto (~%.1f s per size, %d..%d)  warmup: %d",
                  kTargetSecondsPerSize, kMinIters, kMaxIters, o.warmup);
  else
    std::snprintf(buf, sizeof buf, "%d  warmup: %d", o.iters, o.warmup);
  return buf;
}

// --op codec: one core, no ranks, its own table and CSV columns.
int run_codecs(const Options& opts) {
  std::FILE* csv = nullptr;
  if (!opts.csv_path.empty()) {
    csv = std::fopen(opts.csv_path.c_str(), "w");
    if (!csv) {
      std::fprintf(stderr, "ferry-bench: --csv: cannot write '%s': %s\n", opts.csv_path.c_str(),
                   std::strerror(errno));
      return 2;
    }
  }
  int status = 1;
  try {
    status = run_codec_bench(opts, sweep_sizes(opts), csv);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", cli::error_line("ferry-bench", e.what()).c_str());
  }
  if (csv && std::fclose(csv) != 0) {
    std::fprintf(stderr, "ferry-bench: error writing '%s': %s\n", opts.csv_path.c_str(),
                 std::strerror(errno));
    status = 1;
  }
  return status;
}

int run(int argc, char** argv) {
  Options opts;
  std::unique_ptr<Launcher> launcher;
  std::FILE* csv = nullptr;
  std::string algo_table;
  try {
    opts = parse_options(argc, argv);
    // Under a launcher without --transport mpi / ucx each process would run its own
    // single-process bench and print its own table: refuse, and say what to add.
    if (const LaunchedAs launched = launched_as(); launched.size > 1) {
      if (launched.by_ferry_run)
        throw UsageError("started by ferry-run, which ferry-bench does not support: start it with "
                         "mpiexec -n N ferry-bench --transport mpi (or ucx)");
      if (opts.transport == "local" && !opts.codec) {
        if (launched.rank != 0) return 2;  // rank 0 says why
        throw UsageError(std::string("started as one of ") + std::to_string(launched.size) +
                         " processes (mpiexec) with --transport local: every process would run "
                         "its own single-process bench; add --transport mpi or --transport ucx");
      }
    }
    if (opts.codec) return run_codecs(opts);
    launcher = make_launcher(opts.transport, opts.world_size);
    opts.world_size = launcher->world_size();
    try {
      config();  // a bad FERRY_* variable is reported here, by name
    } catch (const InvalidArgument& e) {
      throw UsageError(std::string("environment: ") + e.what());
    }
    try {
      if (!opts.algo.empty()) set_algorithm_override(opts.algo);
      algo_table = algorithm_table();  // reads FERRY_ALGO when --algo is absent
    } catch (const InvalidArgument& e) {
      throw UsageError(std::string(opts.algo.empty() ? "FERRY_ALGO: " : "--algo: ") + e.what());
    }
    if (!opts.csv_path.empty() && launcher->reports()) {
      csv = std::fopen(opts.csv_path.c_str(), "w");
      if (!csv)
        throw UsageError("--csv: cannot write '" + opts.csv_path + "': " + std::strerror(errno));
    }
    if (!opts.json_path.empty() && launcher->reports()) {
      // Written at the end; opened now so a bad path is refused before minutes of measuring.
      std::FILE* json = std::fopen(opts.json_path.c_str(), "w");
      if (!json)
        throw UsageError("--json: cannot write '" + opts.json_path + "': " + std::strerror(errno));
      std::fclose(json);
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "ferry-bench: %s\nRun 'ferry-bench --help' for the options.\n", e.what());
    return 2;
  }

  const std::vector<size_t> sizes = sweep_sizes(opts);
  Report report({opts.transport, opts.world_size, opts.dtype, opts.vs_mpi, opts.mpi_nonblocking,
                 opts.differentiable},
                csv);
  const bool own_table = opts.kjt || !opts.torchrec_ops.empty();
  if (launcher->reports() && !own_table)
    report.header(sizes_str(opts, sizes), iters_str(opts), algo_table);

  std::atomic<bool> all_ok{true};
  int status = 0;
  try {
    launcher->run([&](Group& world, RankSync& sync) {
      if (opts.kjt) {  // --op kjt_all_to_all: its own table
        if (!run_kjt_bench(opts, world, sync, launcher->reports() && world.rank() == 0)) all_ok = false;
        return;
      }
      if (!opts.torchrec_ops.empty()) {  // --op alltoall_pooled,...: its own table
        if (!run_torchrec_ops_bench(opts, sizes, world, sync,
                                    launcher->reports() && world.rank() == 0))
          all_ok = false;
        return;
      }
      Sweep sweep{opts, sizes, world.rank() == 0 ? &report : nullptr, launcher.get()};
      if (!opts.differentiable) {
        const CopyBandwidth copy = copy_bandwidth(world, sync);
        if (sweep.report) sweep.report->set_copy_bandwidth(copy);
      }
      for (OpKind op : opts.ops) {
        const bool ok = op == OpKind::Memcpy ? bench_memcpy(sweep, world, sync)
                                             : bench_collective(op, sweep, world, sync);
        if (!ok) {
          all_ok = false;
          return;  // every rank saw the same verdict, so all stop here together
        }
      }
      if (!opts.differentiable) {
        const CopyBandwidth copy = copy_bandwidth(world, sync);
        if (sweep.report) sweep.report->end_copy_bandwidth(copy);
      }
    });
    if (!all_ok) {
      std::fprintf(stderr, "ferry-bench: check failed: stopped before timing a wrong result\n");
      status = 1;
    }
    int64_t wrong = 0;
    int wrong_rows = 0;
    for (const Row& r : report.rows()) {
      if (r.wrong > 0) {
        wrong += r.wrong;
        ++wrong_rows;
      }
    }
    if (wrong > 0) {
      std::fprintf(stderr, "ferry-bench: check failed: #wrong: %lld wrong elements in %d rows\n",
                   static_cast<long long>(wrong), wrong_rows);
      status = 1;
    }
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", cli::error_line("ferry-bench", e.what()).c_str());
    status = 1;
  }
  if (!opts.json_path.empty() && launcher->reports()) {
    try {
      write_bench_json(opts.json_path,
                       JsonRun{opts, sizes, algo_table, report.rows(), status == 0});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ferry-bench: %s\n", e.what());
      status = 1;
    }
  }
  if (csv && std::fclose(csv) != 0) {
    std::fprintf(stderr, "ferry-bench: error writing '%s': %s\n", opts.csv_path.c_str(),
                 std::strerror(errno));
    status = 1;
  }
  if (launcher) launcher->set_exit_status(status);
  return status;
}

}  // namespace
}  // namespace ferry::bench

// Anything that escapes run() (a failed allocation, an error outside its sweeps) is one line
// and status 1 too, never std::terminate.
int main(int argc, char** argv) {
  return ferry::cli::guarded_main("ferry-bench", [&] { return ferry::bench::run(argc, argv); });
}
