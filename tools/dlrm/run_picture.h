// ferry-dlrm --svg: a picture of one run. Top left, the training loss per step (raw and smoothed)
// with the test loss at the end of each epoch; top right, the test AUC per epoch against the
// learning threshold; below, the median step time by stage beside the step's compute limit.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ferry::dlrm_tool {

struct EpochRecord {
  double train_loss = 0, test_loss = 0, auc = 0;
};

// Everything the picture shows. Non-finite numbers are left out of the picture rather than
// written: a diverged loss leaves a gap in its line, never "nan" in the file.
struct RunPicture {
  std::string title;
  std::vector<double> step_loss;         // training loss of every step, all epochs in order
  std::vector<int64_t> epoch_end_steps;  // per epoch: number of steps done when it ended
  std::vector<EpochRecord> epochs;       // per epoch
  double auc_threshold = 0;              // the learning threshold
  // Median ms per stage, in step order. Medians of each stage, so the stack need not add up to
  // step_ms.
  std::vector<std::pair<std::string, double>> stages;
  double step_ms = 0;           // median step time
  double compute_limit_ms = 0;  // compute_limit.h's sum; <= 0: unknown
};

// Writes the picture (an SVG about 1100 px wide, no scripts, no external fonts). Throws
// InvalidArgument naming the path if the file cannot be written.
void write_svg(const std::string& path, const RunPicture& picture);

}  // namespace ferry::dlrm_tool
