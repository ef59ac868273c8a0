// ferry::torchrec::CriteoTsvSource: reads Criteo's click-log TSV format (the Kaggle / Terabyte
// day files, uncompressed) from a path, as a rank's stream of batches.
//
// One line per sample, tab-separated: the label (0 or 1), num_dense integer columns, then
// num_sparse categorical columns of hexadecimal strings (defaults 13 and 26). Any column may be
// empty. Conversion (ferry's choices, documented here):
//   dense        log(1 + max(v, 0)) as float32; empty -> 0.
//   categorical  the hex value (up to 16 digits) modulo the table's cardinality -> a bag of one
//                id; empty -> an empty bag (length 0).
// Lines are samples 0, 1, ... of the file; ShardOptions (batch.h) assign batches to ranks. The
// constructor scans the file once to count its lines (needed for even_batches); next_batch then
// reads forward, parsing only this rank's lines. A malformed line (wrong column count, bad
// number) throws InvalidArgument naming the path and line number.
#pragma once

#include <ferry/collectives/torchrec/datasets/batch.h>

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace ferry::torchrec {

struct CriteoTsvConfig {
  std::string path;
  int64_t num_dense = 13;
  int64_t num_sparse = 26;
  std::vector<int64_t> cardinalities{};  // num_sparse entries; empty = default_cardinalities
};

class CriteoTsvSource : public BatchSource {
 public:
  CriteoTsvSource(CriteoTsvConfig config, const ShardOptions& options);
  std::optional<Batch> next_batch() override;
  int64_t num_batches() const override { return schedule_->num_batches(); }
  void reset() override;
  int64_t num_lines() const { return lines_; }

 private:
  CriteoTsvConfig config_;
  ShardOptions options_;
  int64_t lines_ = 0;
  std::optional<ShardSchedule> schedule_;
  std::ifstream in_;
  int64_t line_ = 0;  // index of the next line in_ reads
  int64_t next_ = 0;  // this rank's next batch
};

}  // namespace ferry::torchrec
