// ferry-dlrm --svg: a picture of one run (per-epoch AUC and losses, rank 0's step stages).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ferry::dlrm_tool {

struct EpochRecord {
  double train_loss = 0, test_loss = 0, auc = 0;
};

// A picture of the run: test AUC and losses per epoch (left), and rank 0's median step time by
// stage (right, one stacked bar; medians of each stage, so the stack need not add up to the
// median total).
void write_svg(const std::string& path, const std::vector<EpochRecord>& epochs,
               const std::vector<std::pair<std::string, double>>& stages, double threshold,
               const std::string& title);

}  // namespace ferry::dlrm_tool
