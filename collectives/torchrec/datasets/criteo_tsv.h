// ferry::torchrec::CriteoTsvSource: reads Criteo's click-log TSV format (the Kaggle / Terabyte
// day files, uncompressed) from a path, as a rank's stream of batches.
//
// One line per sample, tab-separated: the label (0 or 1), num_dense integer columns, then
// num_sparse categorical columns of hexadecimal strings (defaults 13 and 26). Any column but the
// label may be empty. Conversion, as torchrec's Criteo pipeline does it (its binary
// preprocessing, BinaryCriteoUtils.tsv_to_npys, and the in-memory reader's `hashes`):
//   dense        log(v + 3) as float32 (computed in double), an empty column read as v = 0
//                (log 3). Values below -2 are read as -2 (log 1 = 0): torchrec adds 3 without a
//                floor, so the -3 that Criteo's Kaggle data holds would be log 0 = -inf there;
//                every value torchrec maps to a finite number maps to the same one here.
//   categorical  int(hex, 16) % cardinality of the table: a bag of exactly one id; an empty
//                column is 0, so id 0 (torchrec fills a missing value with "0" the same way).
//                The value is taken as an unsigned 64-bit integer (up to 16 hex digits);
//                torchrec's npy files store it as int32, so there a value of 2^31 or more (8 hex
//                digits from 80000000) wraps negative before the modulo.
// Lines are samples 0, 1, ... of the file; ShardOptions (batch.h) assign batches to ranks. The
// constructor scans the file once to count its lines (needed for even_batches); next_batch then
// reads forward, parsing only this rank's lines. A malformed line (wrong column count, bad
// number, label not 0 or 1) throws InvalidArgument naming the path and line number.
// To parse on a background thread while the step computes, wrap the source in a
// PrefetchingSource (prefetching_source.h).
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
