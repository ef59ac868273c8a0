#include "tools/bench/report.h"

#include <algorithm>
#include <sstream>

namespace ferry::bench {

Stats summarize(std::vector<double> seconds) {
  FERRY_CHECK(!seconds.empty(), InvalidArgument, "summarize: no samples");
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  Stats s;
  s.min = seconds.front();
  s.max = seconds.back();
  s.median = n % 2 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
  return s;
}

void set_bandwidth(Row& row, int world_size) {
  row.algbw_gbps = row.time.median > 0 ? static_cast<double>(row.bytes) / row.time.median / 1e9 : 0;
  row.busbw_gbps = row.algbw_gbps * bus_factor(row.op, world_size);
}

Report::Report(Setup setup, std::FILE* csv) : setup_(std::move(setup)), csv_(csv) {
  if (csv_) {
    std::fprintf(csv_,
                 "op,transport,world_size,dtype,bytes,count,algorithm,time_us_median,time_us_min,"
                 "time_us_max,algbw_gbps,busbw_gbps,mpi_time_us_median,ratio,place,wrong,ideal_us,x_ideal,"
                 "x_now\n");
    std::fflush(csv_);
  }
}

void Report::header(const std::string& sizes, const std::string& iters,
                    const std::string& algo_table) {
  std::printf("# ferry-bench  transport: %s  world size: %d  dtype: %s\n",
              setup_.transport.c_str(), setup_.world_size, dtype_name(setup_.dtype));
  std::printf("# sizes: %s  iters: %s\n", sizes.c_str(), iters.c_str());
  std::printf("# time: median over iterations of the slowest rank; GB/s = 1e9 B/s\n");
  if (setup_.differentiable)
    std::printf("# time: forward + backward of the differentiable op (a Variable through the "
                "tape); raw: the same two collectives called by hand on preallocated buffers, "
                "iterations alternating; ratio = time / raw, added = time - raw\n");
  if (setup_.vs_mpi)
    std::printf("# mpi: the %s MPI call of the same op and size, iterations alternating "
                "with ferry's; ratio = time / mpi, added = time - mpi\n",
                setup_.mpi_nonblocking ? "non-blocking (+ MPI_Wait)" : "blocking");
  std::printf("# algorithms:\n");
  std::istringstream lines(algo_table);
  for (std::string line; std::getline(lines, line);) std::printf("#   %s\n", line.c_str());
  std::fflush(stdout);
}

void Report::set_copy_bandwidth(const CopyBandwidth& bw) {
  copy_bps_ = bw.together;
  if (setup_.differentiable) return;  // two collectives per row: no one op's ideal
  std::printf("# ideal: copy bandwidth %.2f GB/s per rank, every rank copying %zu MiB at once "
              "(rank 0 alone: %.2f GB/s); ideal(us) = the bytes a rank must read and write for "
              "the op, / 2 (a memcpy reads and writes each byte; ferry-bench --help), at that "
              "rate; x_ideal = time / ideal\n"
              "# x_now: time / the ideal at the copy bandwidth measured again just before the "
              "row's size (from %zu MiB up: the rate drifts within a run)\n",
              bw.together / 1e9, kIdealCopyBytes >> 20, bw.alone / 1e9, kNowFromBytes >> 20);
  std::fflush(stdout);
}

void Report::end_copy_bandwidth(const CopyBandwidth& bw) {
  if (setup_.differentiable || copy_bps_ <= 0 || bw.together <= 0) return;
  std::printf("#\n# ideal at the end: copy bandwidth %.2f GB/s per rank, %.2fx the start's; "
              "against it every x_ideal above would be %.2fx what it is\n",
              bw.together / 1e9, bw.together / copy_bps_, bw.together / copy_bps_);
  std::fflush(stdout);
}

void Report::begin_op(OpKind op) {
  busbw_sum_ = 0;
  rows_ = 0;
  std::printf("#\n# %s (busbw = algbw * %.3f)\n", op_name(op), bus_factor(op, setup_.world_size));
  // The algorithm column fits the longest name, recursive_doubling.
  std::printf("# %13s %12s %-18s %5s %6s %11s %11s %11s %12s %12s %7s", "size(B)", "count",
              "algorithm", "place", "iters", "time(us)", "min(us)", "max(us)", "algbw(GB/s)",
              "busbw(GB/s)", "#wrong");
  if (setup_.vs_mpi || setup_.differentiable)
    std::printf(" %11s %7s %10s", setup_.differentiable ? "raw(us)" : "mpi(us)", "ratio",
                "added(us)");
  std::printf(" %10s %8s %6s\n", "ideal(us)", "x_ideal", "x_now");
  std::fflush(stdout);
}

void Report::row(const Row& given) {
  Row r = given;
  const double ideal = ideal_bytes(r.op, r.bytes, setup_.world_size, r.place);
  r.ideal_us = copy_bps_ > 0 && !setup_.differentiable && ideal > 0 ? ideal / copy_bps_ * 1e6 : 0;
  const double x_ideal = r.ideal_us > 0 ? r.time.median * 1e6 / r.ideal_us : 0;
  r.now_ideal_us = r.ideal_us > 0 && copy_now_bps_ > 0 ? ideal / copy_now_bps_ * 1e6 : 0;
  const double x_now = r.now_ideal_us > 0 ? r.time.median * 1e6 / r.now_ideal_us : 0;
  const std::string wrong = r.wrong < 0 ? "-" : std::to_string(r.wrong);
  std::printf("  %13zu %12lld %-18s %5s %6d %11.3f %11.3f %11.3f %12.3f %12.3f %7s", r.bytes,
              static_cast<long long>(r.count), r.algorithm.c_str(), place_name(r.place), r.iters,
              r.time.median * 1e6, r.time.min * 1e6, r.time.max * 1e6, r.algbw_gbps, r.busbw_gbps,
              wrong.c_str());
  const double ratio = r.baseline && r.baseline->median > 0 ? r.time.median / r.baseline->median : 0;
  if (r.baseline)
    std::printf(" %11.3f %7.3f %10.3f", r.baseline->median * 1e6, ratio,
                (r.time.median - r.baseline->median) * 1e6);
  else if (setup_.vs_mpi)
    std::printf(" %11s %7s %10s", "-", "-", "-");  // in place: MPI is timed out of place only
  if (r.ideal_us > 0)
    std::printf(" %10.3f %8.2f", r.ideal_us, x_ideal);
  else
    std::printf(" %10s %8s", "-", "-");
  if (x_now > 0)
    std::printf(" %6.2f\n", x_now);
  else
    std::printf(" %6s\n", "-");
  std::fflush(stdout);
  if (csv_) {
    std::fprintf(csv_, "%s,%s,%d,%s,%zu,%lld,%s,%.3f,%.3f,%.3f,%.4f,%.4f,", op_name(r.op),
                 setup_.transport.c_str(), setup_.world_size, dtype_name(setup_.dtype), r.bytes,
                 static_cast<long long>(r.count), r.algorithm.c_str(), r.time.median * 1e6,
                 r.time.min * 1e6, r.time.max * 1e6, r.algbw_gbps, r.busbw_gbps);
    if (r.baseline)
      std::fprintf(csv_, "%.3f,%.4f,", r.baseline->median * 1e6, ratio);
    else
      std::fprintf(csv_, ",,");
    std::fprintf(csv_, "%s,%s,", place_name(r.place), r.wrong < 0 ? "" : wrong.c_str());
    if (r.ideal_us > 0)
      std::fprintf(csv_, "%.3f,%.4f,", r.ideal_us, x_ideal);
    else
      std::fprintf(csv_, ",,");
    if (x_now > 0)
      std::fprintf(csv_, "%.4f\n", x_now);
    else
      std::fprintf(csv_, "\n");
    std::fflush(csv_);
  }
  busbw_sum_ += r.busbw_gbps;
  ++rows_;
  all_rows_.push_back(r);
}

void Report::end_op() {
  if (rows_ > 0) std::printf("# mean busbw: %.3f GB/s over %d rows\n", busbw_sum_ / rows_, rows_);
  std::fflush(stdout);
}

}  // namespace ferry::bench
