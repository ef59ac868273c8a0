// Statistics over iterations and the two outputs of ferry-bench: the table on stdout and the
// optional CSV file (same rows).
#pragma once

#include "tools/bench/ops.h"

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace ferry::bench {

struct Stats {
  double median = 0;  // seconds
  double min = 0;
  double max = 0;
};

// `seconds` must not be empty. The median of an even count is the mean of the middle two.
Stats summarize(std::vector<double> seconds);

struct Row {
  OpKind op;
  size_t bytes;   // count * dtype size: the size actually moved, after rounding
  int64_t count;  // elements
  std::string algorithm;
  int iters;
  Stats time;
  double algbw_gbps;
  double busbw_gbps;
  std::optional<Stats> baseline;  // --vs-mpi: the raw MPI call's times; --differentiable: raw pair
  Place place = Place::OutOfPlace;
  int64_t wrong = -1;  // #wrong summed over ranks; -1: not counted (--differentiable)
  // The time the op's bytes need at the run's copy bandwidth (ops.h's ideal_bytes); 0: none
  // (barrier, --differentiable, no bandwidth measured). Filled by Report::row.
  double ideal_us = 0;
  // The same at the copy bandwidth measured just before this row's size (kNowFromBytes and
  // up); 0: not measured. Filled by Report::row.
  double now_ideal_us = 0;
};

// From this size up, ferry-bench measures the copy bandwidth again before each size's rows:
// the host's rate drifts (by half within one run, here), and the rows where bytes, not the
// per-op cost, make the time are compared with the rate of their moment as well.
inline constexpr size_t kNowFromBytes = size_t{1} << 20;

// Fills the bandwidth fields of `row` from its time (GB = 1e9 bytes, as nccl-tests).
void set_bandwidth(Row& row, int world_size);

class Report {
 public:
  struct Setup {
    std::string transport;
    int world_size;
    DType dtype;
    bool vs_mpi = false;
    bool mpi_nonblocking = false;
    bool differentiable = false;  // the baseline is the raw forward + backward pair
  };
  // `csv` may be null; the Report writes to it but does not own it.
  Report(Setup setup, std::FILE* csv);

  void header(const std::string& sizes, const std::string& iters, const std::string& algo_table);
  // The copy bandwidths that ideal_us is measured against (its `together`), printed as a
  // header line; rows before it get no ideal_us.
  void set_copy_bandwidth(const CopyBandwidth& bw);
  // The same measured again after the last op, printed beside the start's: the machine's copy
  // rate drifts, and every x_ideal moves with it (the rows keep the start's).
  void end_copy_bandwidth(const CopyBandwidth& bw);
  // The copy bandwidth measured just before the next rows (their x_now); a zero one: none.
  void set_copy_now(const CopyBandwidth& bw) { copy_now_bps_ = bw.together; }
  void begin_op(OpKind op);
  // Prints `row` with its ideal_us filled in, and keeps it.
  void row(const Row& row);
  // Ends an op's table with nccl-tests' summary line (mean busbw over its sizes).
  void end_op();

  // Every row so far, in order (for --json).
  const std::vector<Row>& rows() const { return all_rows_; }

 private:
  Setup setup_;
  std::FILE* csv_;
  double copy_bps_ = 0;
  double copy_now_bps_ = 0;
  double busbw_sum_ = 0;
  int rows_ = 0;
  std::vector<Row> all_rows_;
};

}  // namespace ferry::bench
