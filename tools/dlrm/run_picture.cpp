#include "tools/dlrm/run_picture.h"

#include <ferry/runtime/error.h>

#include <algorithm>
#include <cstdio>

namespace ferry::dlrm_tool {

void write_svg(const std::string& path, const std::vector<EpochRecord>& epochs,
               const std::vector<std::pair<std::string, double>>& stages, double threshold,
               const std::string& title) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) throw InvalidArgument("ferry-dlrm: cannot write " + path);
  const double W = 820, H = 360, x0 = 60, y0 = 40, pw = 380, ph = 260;
  std::fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" "
                  "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" "
                  "height=\"100%%\" fill=\"white\"/>\n<text x=\"%g\" y=\"20\" font-size=\"14\">%s"
                  "</text>\n", W, H, x0, title.c_str());
  // Left: lines on [0, 1] (AUC) and [0, max loss].
  std::fprintf(f, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" "
                  "stroke=\"black\"/>\n", x0, y0, pw, ph);
  double max_loss = 0;
  for (const EpochRecord& e : epochs) max_loss = std::max({max_loss, e.train_loss, e.test_loss});
  const size_t n = epochs.size();
  auto px = [&](size_t i) { return x0 + (n <= 1 ? pw / 2 : pw * static_cast<double>(i) / static_cast<double>(n - 1)); };
  auto line = [&](const char* color, const char* label, int row, auto value, double lo, double hi) {
    std::string pts;
    for (size_t i = 0; i < n; ++i) {
      const double y = y0 + ph * (1 - (value(epochs[i]) - lo) / (hi - lo));
      pts += std::to_string(px(i)) + "," + std::to_string(y) + " ";
      std::fprintf(f, "<circle cx=\"%g\" cy=\"%g\" r=\"3\" fill=\"%s\"/>\n", px(i), y, color);
    }
    std::fprintf(f, "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"/>\n"
                    "<text x=\"%g\" y=\"%g\" fill=\"%s\">%s</text>\n",
                 pts.c_str(), color, x0 + 8, y0 + 16.0 * row, color, label);
  };
  const double auc_lo = 0.5, auc_hi = 0.9;
  line("#c33", "test AUC (0.5-0.9)", 1, [](const EpochRecord& e) { return e.auc; }, auc_lo, auc_hi);
  line("#36c", "train loss", 2, [](const EpochRecord& e) { return e.train_loss; }, 0.0, max_loss * 1.1);
  line("#393", "test loss", 3, [](const EpochRecord& e) { return e.test_loss; }, 0.0, max_loss * 1.1);
  const double ty = y0 + ph * (1 - (threshold - auc_lo) / (auc_hi - auc_lo));
  std::fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"#c33\" "
                  "stroke-dasharray=\"4 3\"/>\n<text x=\"%g\" y=\"%g\" fill=\"#c33\">AUC "
                  "threshold %.3f</text>\n<text x=\"%g\" y=\"%g\">epoch 1 .. %zu</text>\n",
               x0, ty, x0 + pw, ty, x0 + pw - 130, ty - 4, threshold, x0 + pw / 2 - 30,
               y0 + ph + 18, n);
  // Right: the stacked bar of stage medians.
  const double bx = x0 + pw + 80, bw = 60;
  double sum = 0;
  for (const auto& st : stages) sum += st.second;
  const char* colors[] = {"#999", "#c9c", "#f93", "#fc3", "#9c6", "#69c", "#36c", "#c66", "#933"};
  double y = y0 + ph;
  size_t k = 0;
  for (const auto& [name, ms] : stages) {
    const double h = sum > 0 ? ph * ms / sum : 0;
    y -= h;
    std::fprintf(f, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"%s\"/>\n"
                    "<rect x=\"%g\" y=\"%g\" width=\"10\" height=\"10\" fill=\"%s\"/>\n"
                    "<text x=\"%g\" y=\"%g\">%s %.2f ms</text>\n",
                 bx, y, bw, h, colors[k % 9], bx + bw + 20, y0 + 18.0 * static_cast<double>(k),
                 colors[k % 9], bx + bw + 34, y0 + 18.0 * static_cast<double>(k) + 10, name.c_str(), ms);
    ++k;
  }
  std::fprintf(f, "<text x=\"%g\" y=\"%g\">step stages (median ms, rank 0)</text>\n</svg>\n", bx,
               y0 + ph + 18);
  std::fclose(f);
}

}  // namespace ferry::dlrm_tool
