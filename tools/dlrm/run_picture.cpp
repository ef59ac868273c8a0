#include "tools/dlrm/run_picture.h"

#include <ferry/runtime/error.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>

namespace ferry::dlrm_tool {
namespace {

// Rough advance of a sans-serif glyph as a fraction of the font size: enough to keep labels
// apart without measuring text (the SVG names no font file, so exact widths are unknowable).
constexpr double kGlyph = 0.62;
double text_width(const std::string& s, double font) {
  return kGlyph * font * static_cast<double>(s.size());
}

std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

// Coordinates: one decimal, and never a non-finite number in the file.
std::string num(double v) {
  if (!std::isfinite(v)) v = 0;
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

std::string fixed(double v, int decimals) {
  if (!std::isfinite(v)) return "n/a";
  char b[48];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

// Milliseconds with about three significant digits: a compute limit of 0.004 ms must not read 0.
std::string ms(double v) {
  if (!std::isfinite(v)) return "n/a";
  char b[48];
  if (std::fabs(v) >= 100) std::snprintf(b, sizeof b, "%.0f", v);
  else if (std::fabs(v) >= 10) std::snprintf(b, sizeof b, "%.1f", v);
  else if (std::fabs(v) >= 0.01 || v == 0) std::snprintf(b, sizeof b, "%.2f", v);
  else std::snprintf(b, sizeof b, "%.1g", v);
  return b;
}

double finite_or(double v, double fallback) { return std::isfinite(v) ? v : fallback; }

// Round ticks (1, 2 or 5 times a power of ten) covering [lo, hi]; the axis spans the first to the
// last tick so that both ends carry a value.
struct Ticks {
  double lo = 0, hi = 1, step = 1;
  int decimals = 0;
  std::vector<double> values;
};

Ticks nice_ticks(double lo, double hi, int target, bool integer, bool nonnegative) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (hi < lo) std::swap(lo, hi);
  if (hi - lo <= 1e-12 * std::max(1.0, std::fabs(hi))) {  // one value: widen around it
    const double d = lo != 0 ? std::fabs(lo) * 0.1 : 1;
    lo -= d;
    hi += d;
  }
  if (nonnegative) lo = std::max(lo, 0.0);
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double r = raw / mag;
  double step = (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * mag;
  if (integer) step = std::max(step, 1.0);
  Ticks t;
  t.step = step;
  t.lo = std::floor(lo / step + 1e-9) * step;
  t.hi = std::ceil(hi / step - 1e-9) * step;
  if (t.hi <= t.lo) t.hi = t.lo + step;
  t.decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
  for (int i = 0;; ++i) {
    double v = t.lo + i * step;
    if (v > t.hi + step * 1e-6) break;
    if (std::fabs(v) < step * 1e-9) v = 0;  // no "-0.00"
    t.values.push_back(v);
  }
  return t;
}

// A plot area and the data ranges it maps.
struct Frame {
  double x0, y0, w, h;
  Ticks xt, yt;
  double px(double x) const { return x0 + w * (x - xt.lo) / (xt.hi - xt.lo); }
  double py(double y) const { return y0 + h * (1 - (y - yt.lo) / (yt.hi - yt.lo)); }
};

struct Point {
  double x = 0, y = 0;
  bool gap = false;  // the line breaks here (a non-finite value)
};

class Svg {
 public:
  void raw(const std::string& s) { out_ += s; }
  void text(double x, double y, const std::string& s, const std::string& attrs = "") {
    out_ += "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\"" + (attrs.empty() ? "" : " ") +
            attrs + ">" + escape(s) + "</text>\n";
  }
  void line(double x1, double y1, double x2, double y2, const std::string& attrs) {
    out_ += "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" +
            num(y2) + "\" " + attrs + "/>\n";
  }
  void rect(double x, double y, double w, double h, const std::string& attrs) {
    out_ += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(std::max(0.0, w)) +
            "\" height=\"" + num(std::max(0.0, h)) + "\" " + attrs + "/>\n";
  }
  void circle(double x, double y, double r, const std::string& attrs) {
    out_ += "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"" + num(r) + "\" " + attrs +
            "/>\n";
  }
  // Polylines split at gaps; a lone point between gaps is drawn as a dot so it stays visible.
  void polyline(const std::vector<Point>& pts, const std::string& colour, double width,
                const std::string& extra = "") {
    std::vector<const Point*> run;
    auto flush = [&] {
      if (run.size() == 1) {
        circle(run[0]->x, run[0]->y, std::max(3.0, 1.5 * width),
               "fill=\"" + colour + "\" " + extra);
      } else if (run.size() > 1) {
        out_ += "<polyline fill=\"none\" stroke=\"" + colour + "\" stroke-width=\"" + num(width) +
                "\" stroke-linejoin=\"round\" " + extra + " points=\"";
        for (const Point* p : run) out_ += num(p->x) + "," + num(p->y) + " ";
        out_ += "\"/>\n";
      }
      run.clear();
    };
    for (const Point& p : pts) {
      if (p.gap) flush();
      else run.push_back(&p);
    }
    flush();
  }
  // A legend entry (swatch, then label) starting at x on the baseline y; returns where the next
  // entry may start.
  double legend_item(double x, double y, const std::string& kind, const std::string& colour,
                     const std::string& label) {
    if (kind == "line")
      line(x, y - 4, x + 22, y - 4, "stroke=\"" + colour + "\" stroke-width=\"2\"");
    if (kind == "faint")
      line(x, y - 4, x + 22, y - 4, "stroke=\"" + colour + "\" stroke-width=\"1\" opacity=\"0.6\"");
    if (kind == "dots") {
      line(x, y - 4, x + 22, y - 4, "stroke=\"" + colour + "\" stroke-width=\"1.5\"");
      circle(x + 11, y - 4, 3.5, "fill=\"" + colour + "\"");
    }
    if (kind == "dashed")
      line(x, y - 4, x + 22, y - 4,
           "stroke=\"" + colour + "\" stroke-width=\"1.5\" stroke-dasharray=\"5 3\"");
    text(x + 28, y, label);
    return x + 28 + text_width(label, 12) + 18;
  }
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

// Frame, gridlines, tick values and axis titles. x tick labels are dropped where they would
// collide with the previous one.
void draw_axes(Svg& svg, const Frame& f, const std::string& x_title, const std::string& y_title) {
  for (double v : f.yt.values) {
    const double y = f.py(v);
    svg.line(f.x0, y, f.x0 + f.w, y, "stroke=\"#e6e6e6\"");
    svg.line(f.x0 - 4, y, f.x0, y, "stroke=\"#333\"");
    svg.text(f.x0 - 7, y + 4, fixed(v, f.yt.decimals), "text-anchor=\"end\"");
  }
  double last_right = -1e9;
  for (double v : f.xt.values) {
    const double x = f.px(v);
    svg.line(x, f.y0 + f.h, x, f.y0 + f.h + 4, "stroke=\"#333\"");
    const std::string label = fixed(v, f.xt.decimals);
    const double half = text_width(label, 12) / 2;
    if (x - half < last_right + 6) continue;
    svg.text(x, f.y0 + f.h + 17, label, "text-anchor=\"middle\"");
    last_right = x + half;
  }
  svg.rect(f.x0, f.y0, f.w, f.h, "fill=\"none\" stroke=\"#333\"");
  svg.text(f.x0 + f.w / 2, f.y0 + f.h + 35, x_title, "text-anchor=\"middle\" font-size=\"13\"");
  const double ty = f.y0 + f.h / 2;
  const double tx = f.x0 - 50;
  svg.text(tx, ty, y_title,
           "text-anchor=\"middle\" font-size=\"13\" transform=\"rotate(-90 " + num(tx) + " " +
               num(ty) + ")\"");
}

// Where epoch k ended, in steps: the recorded count, or an even share when none was recorded.
double epoch_end(const RunPicture& p, size_t k, double n_steps) {
  if (k < p.epoch_end_steps.size())
    return std::clamp(static_cast<double>(p.epoch_end_steps[k]), 0.0, n_steps);
  return n_steps * static_cast<double>(k + 1) / static_cast<double>(p.epochs.size());
}

constexpr double kWidth = 1100;
constexpr double kRowTop = 112, kPlotH = 240;  // the top row's plot areas

void draw_training(Svg& svg, const RunPicture& p) {
  const size_t n = p.step_loss.size();
  double n_steps = static_cast<double>(n);
  for (int64_t e : p.epoch_end_steps) n_steps = std::max(n_steps, static_cast<double>(e));

  double lo = INFINITY, hi = -INFINITY;
  for (double v : p.step_loss)
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  for (const EpochRecord& e : p.epochs)
    if (std::isfinite(e.test_loss)) lo = std::min(lo, e.test_loss), hi = std::max(hi, e.test_loss);
  if (lo > hi) lo = 0, hi = 1;
  const bool nonnegative = lo >= 0;
  const double pad = 0.03 * (hi - lo);
  Frame f{70, kRowTop, 600, kPlotH, nice_ticks(0, std::max(1.0, n_steps), 6, true, true),
          nice_ticks(lo - pad, hi + pad, 5, false, nonnegative)};

  svg.text(f.x0, 62, "Training", "font-size=\"14\" font-weight=\"bold\"");
  // Epoch boundaries under everything else; labels above the plot, centred on each epoch's span.
  double last_right = -1e9, begin = 0;
  for (size_t k = 0; k < p.epochs.size(); ++k) {
    const double end = epoch_end(p, k, n_steps);
    const double x = f.px(end);
    svg.line(x, f.y0, x, f.y0 + f.h, "stroke=\"#bbbbbb\" stroke-dasharray=\"3 3\"");
    const std::string label = "epoch " + std::to_string(k + 1);
    const double cx = (f.px(begin) + x) / 2, half = text_width(label, 11) / 2;
    if (cx - half >= last_right + 6 && cx - half >= f.x0 - 20 && cx + half <= f.x0 + f.w + 20) {
      svg.text(cx, f.y0 - 6, label, "text-anchor=\"middle\" font-size=\"11\" fill=\"#666\"");
      last_right = cx + half;
    }
    begin = end;
  }
  draw_axes(svg, f, "step", "loss");

  // More steps than pixels: each column keeps its minimum and maximum, so spikes stay visible.
  const size_t columns = static_cast<size_t>(f.w);
  std::vector<Point> raw;
  auto at = [&](size_t i) {
    const double v = p.step_loss[i];
    if (!std::isfinite(v)) return Point{0, 0, true};
    return Point{f.px(static_cast<double>(i + 1)), f.py(v), false};
  };
  if (n <= 2 * columns) {
    for (size_t i = 0; i < n; ++i) raw.push_back(at(i));
  } else {
    for (size_t c = 0; c < columns; ++c) {
      const size_t b = n * c / columns, e = n * (c + 1) / columns;
      std::optional<size_t> mn, mx;
      for (size_t i = b; i < e; ++i) {
        if (!std::isfinite(p.step_loss[i])) continue;
        if (!mn || p.step_loss[i] < p.step_loss[*mn]) mn = i;
        if (!mx || p.step_loss[i] > p.step_loss[*mx]) mx = i;
      }
      if (!mn) {
        raw.push_back(Point{0, 0, true});
        continue;
      }
      raw.push_back(at(std::min(*mn, *mx)));
      raw.push_back(at(std::max(*mn, *mx)));
    }
  }

  // A centred mean over 2h+1 steps, h growing with the run (about 1/60 of it) so that a long run
  // is smoothed as much as a short one looks; prefix sums keep it linear in the steps.
  const size_t h = std::max<size_t>(n >= 10 ? 1 : 0, n / 60);
  std::vector<double> sum(n + 1, 0), count(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    const bool ok = std::isfinite(p.step_loss[i]);
    sum[i + 1] = sum[i] + (ok ? p.step_loss[i] : 0);
    count[i + 1] = count[i] + (ok ? 1 : 0);
  }
  std::vector<Point> smooth;
  const size_t samples = std::min(n, 2 * columns);
  for (size_t s = 0; h > 0 && s < samples; ++s) {
    const size_t i = samples == 1 ? 0 : s * (n - 1) / (samples - 1);
    const size_t b = i >= h ? i - h : 0, e = std::min(n, i + h + 1);
    const double c = count[e] - count[b];
    if (c == 0) smooth.push_back(Point{0, 0, true});
    else smooth.push_back(Point{f.px(static_cast<double>(i + 1)), f.py((sum[e] - sum[b]) / c)});
  }

  std::vector<Point> test;
  for (size_t k = 0; k < p.epochs.size(); ++k) {
    if (!std::isfinite(p.epochs[k].test_loss)) test.push_back(Point{0, 0, true});
    else test.push_back(Point{f.px(epoch_end(p, k, n_steps)), f.py(p.epochs[k].test_loss)});
  }

  const std::string raw_colour = h > 0 ? "#9ecae1" : "#1f77b4", test_colour = "#d62728";
  svg.polyline(raw, raw_colour, h > 0 ? 1 : 1.5);
  svg.polyline(smooth, "#1f77b4", 2);
  svg.polyline(test, test_colour, 1.5);
  for (const Point& q : test)
    if (!q.gap) svg.circle(q.x, q.y, 4, "fill=\"" + test_colour + "\" stroke=\"white\"");
  if (n == 0)
    svg.text(f.x0 + f.w / 2, f.y0 + f.h / 2, "no training steps recorded",
             "text-anchor=\"middle\" fill=\"#888\"");

  double x = f.x0;
  const double y = 84;
  x = svg.legend_item(x, y, h > 0 ? "faint" : "line", raw_colour, "loss per step");
  if (h > 0)
    x = svg.legend_item(x, y, "line", "#1f77b4",
                        "smoothed (mean of " + std::to_string(2 * h + 1) + " steps)");
  svg.legend_item(x, y, "dots", test_colour, "test loss per epoch");
}

void draw_auc(Svg& svg, const RunPicture& p) {
  const size_t e = p.epochs.size();
  const double threshold = p.auc_threshold;
  double lo = INFINITY, hi = -INFINITY;
  auto take = [&](double v) {
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  };
  take(threshold);
  for (const EpochRecord& r : p.epochs) take(r.auc);
  if (lo > hi) lo = 0.5, hi = 1;
  // A margin around the values, inside [0, 1] when they are (AUCs are), so no tick reads 1.05.
  const double pad = std::max(0.1 * (hi - lo), 0.01);
  const bool unit = lo >= 0 && hi <= 1;
  const double plo = unit ? std::max(0.0, lo - pad) : lo - pad;
  const double phi = unit ? std::min(1.0, hi + pad) : hi + pad;
  // Epoch k sits at k; the x range leaves half an epoch on either side.
  Ticks xt = nice_ticks(1, std::max<double>(1, static_cast<double>(e)), 5, true, true);
  xt.values.erase(std::remove_if(xt.values.begin(), xt.values.end(),
                                 [&](double v) { return v < 1 || v > std::max<double>(1, e); }),
                  xt.values.end());
  if (xt.values.empty() || xt.values.front() != 1) xt.values.insert(xt.values.begin(), 1);
  xt.lo = 0.5;
  xt.hi = std::max<double>(1, static_cast<double>(e)) + 0.5;
  Frame f{790, kRowTop, 190, kPlotH, xt, nice_ticks(plo, phi, 5, false, false)};

  svg.text(f.x0 - 50, 62, "Test AUC", "font-size=\"14\" font-weight=\"bold\"");
  draw_axes(svg, f, "epoch", "AUC");
  if (std::isfinite(threshold)) {
    const double y = f.py(threshold);
    svg.line(f.x0, y, f.x0 + f.w, y,
             "stroke=\"#c0392b\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"");
    svg.text(f.x0 + f.w + 6, y + 4, "threshold " + fixed(threshold, 3), "fill=\"#c0392b\"");
  }
  std::vector<Point> pts;
  for (size_t k = 0; k < e; ++k) {
    if (!std::isfinite(p.epochs[k].auc)) pts.push_back(Point{0, 0, true});
    else pts.push_back(Point{f.px(static_cast<double>(k + 1)), f.py(p.epochs[k].auc)});
  }
  svg.polyline(pts, "#6a3d9a", 2);
  for (const Point& q : pts)
    if (!q.gap) svg.circle(q.x, q.y, 4, "fill=\"#6a3d9a\" stroke=\"white\"");
  if (e == 0)
    svg.text(f.x0 + f.w / 2, f.y0 + f.h / 2 - 10, "no epochs",
             "text-anchor=\"middle\" fill=\"#888\"");
  const std::string last = e > 0 ? " (last " + fixed(p.epochs.back().auc, 4) + ")" : "";
  svg.legend_item(f.x0 - 50, 84, "dots", "#6a3d9a", "test AUC" + last);
}

// Returns the y below which the caption may go.
double draw_step(Svg& svg, const RunPicture& p) {
  const double top = 440;
  svg.text(20, top, "Step time (median) by stage", "font-size=\"14\" font-weight=\"bold\"");
  const bool limit_known = std::isfinite(p.compute_limit_ms) && p.compute_limit_ms > 0;
  const double step_ms = std::max(0.0, finite_or(p.step_ms, 0));
  double stage_sum = 0;
  for (const auto& s : p.stages) stage_sum += std::max(0.0, finite_or(s.second, 0));
  const double most = std::max({stage_sum, step_ms, limit_known ? p.compute_limit_ms : 0.0});
  const double bar_h = 30, row1 = top + 22, row2 = row1 + bar_h + 16;
  const double bottom = limit_known ? row2 + bar_h : row1 + bar_h;
  Frame f{170, row1 - 8, 540, bottom - row1 + 16,
          nice_ticks(0, most > 0 ? most : 1, 6, false, true), Ticks{}};
  for (double v : f.xt.values)
    svg.line(f.px(v), f.y0, f.px(v), f.y0 + f.h, "stroke=\"#e6e6e6\"");

  static const char* const kColours[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                         "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  auto colour = [](size_t i) { return std::string(kColours[i % 10]); };
  double x = f.px(0);
  for (size_t i = 0; i < p.stages.size(); ++i) {
    const double w = f.px(std::max(0.0, finite_or(p.stages[i].second, 0))) - f.px(0);
    svg.rect(x, row1, w, bar_h, "fill=\"" + colour(i) + "\"");
    x += w;
  }
  if (p.stages.empty())
    svg.text(f.x0 + 8, row1 + bar_h / 2 + 4, "no stage times", "fill=\"#888\"");
  svg.line(f.px(step_ms), row1 - 6, f.px(step_ms), row1 + bar_h + 6,
           "stroke=\"black\" stroke-width=\"2.5\"");
  svg.text(f.x0 - 10, row1 + 13, "step", "text-anchor=\"end\" font-weight=\"bold\"");
  svg.text(f.x0 - 10, row1 + 27, ms(step_ms) + " ms", "text-anchor=\"end\" fill=\"#555\"");
  if (limit_known) {
    svg.rect(f.px(0), row2, f.px(p.compute_limit_ms) - f.px(0), bar_h, "fill=\"#555\"");
    svg.text(f.x0 - 10, row2 + 13, "compute limit", "text-anchor=\"end\" font-weight=\"bold\"");
    svg.text(f.x0 - 10, row2 + 27, ms(p.compute_limit_ms) + " ms",
             "text-anchor=\"end\" fill=\"#555\"");
  }
  // The ms axis along the bottom of the bars.
  const double ay = f.y0 + f.h;
  svg.line(f.x0, ay, f.x0 + f.w, ay, "stroke=\"#333\"");
  double last_right = -1e9;
  for (double v : f.xt.values) {
    const double tx = f.px(v);
    svg.line(tx, ay, tx, ay + 4, "stroke=\"#333\"");
    const std::string label = fixed(v, f.xt.decimals);
    const double half = text_width(label, 12) / 2;
    if (tx - half < last_right + 6) continue;
    svg.text(tx, ay + 17, label, "text-anchor=\"middle\"");
    last_right = tx + half;
  }
  svg.text(f.x0 + f.w / 2, ay + 35, "ms", "text-anchor=\"middle\" font-size=\"13\"");

  // The legend beside the bars: small stages would have no room for a label on the bar.
  const double lx = 745, rx = 1085;
  double ly = top + 4;
  svg.line(lx, ly - 4, lx + 12, ly - 4, "stroke=\"black\" stroke-width=\"2.5\"");
  svg.text(lx + 18, ly, "median step");
  svg.text(rx - 42, ly, ms(step_ms) + " ms", "text-anchor=\"end\"");
  for (size_t i = 0; i < p.stages.size(); ++i) {
    ly += 17;
    const double v = p.stages[i].second;
    svg.rect(lx, ly - 10, 12, 12, "fill=\"" + colour(i) + "\"");
    svg.text(lx + 18, ly, p.stages[i].first);
    svg.text(rx - 42, ly, ms(v) + " ms", "text-anchor=\"end\"");
    if (stage_sum > 0 && std::isfinite(v)) {
      const double share = 100 * std::max(0.0, v) / stage_sum;
      svg.text(rx, ly, share > 0 && share < 1 ? "<1%" : fixed(share, 0) + "%",
               "text-anchor=\"end\" fill=\"#555\"");
    }
  }
  if (limit_known) {
    ly += 17;
    svg.rect(lx, ly - 10, 12, 12, "fill=\"#555\"");
    svg.text(lx + 18, ly, "compute limit");
    svg.text(rx - 42, ly, ms(p.compute_limit_ms) + " ms", "text-anchor=\"end\"");
  }
  return std::max(ay + 35, ly) + 10;
}

void write_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr)
    throw InvalidArgument("ferry-dlrm: cannot write " + path + ": " + std::strerror(errno));
  const size_t written = std::fwrite(text.data(), 1, text.size(), f);
  const int err = written == text.size() ? 0 : errno;
  // fclose flushes: a full disk may show only here.
  if (std::fclose(f) != 0 || written != text.size())
    throw InvalidArgument("ferry-dlrm: cannot write " + path + ": " +
                          std::strerror(err != 0 ? err : errno));
}

}  // namespace

void write_svg(const std::string& path, const RunPicture& picture) {
  Svg body;
  draw_training(body, picture);
  draw_auc(body, picture);
  double y = draw_step(body, picture) + 12;

  const bool limit_known = std::isfinite(picture.compute_limit_ms) && picture.compute_limit_ms > 0;
  const double step_ms = finite_or(picture.step_ms, 0);
  std::string caption;
  if (limit_known && step_ms > 0) {
    const double r = step_ms / picture.compute_limit_ms;
    caption = "step " + ms(step_ms) + " ms = " + fixed(r, r >= 10 ? 0 : 1) +
              "\u00d7 the compute limit (" + ms(picture.compute_limit_ms) +
              " ms: its GEMMs, interaction and embedding rows at this machine's rates)";
  } else if (limit_known) {
    caption = "step time unknown; compute limit " + ms(picture.compute_limit_ms) + " ms";
  } else {
    caption = "step " + ms(step_ms) + " ms; compute limit unknown (no GEMM rate measured)";
  }
  body.text(20, y, caption, "font-size=\"13\"");
  y += 18;
  if (!picture.stages.empty())
    body.text(20, y,
              "Each stage is its own median, so the stack need not add up to the median step "
              "(black mark).",
              "font-size=\"11\" fill=\"#666\"");
  const double height = std::ceil(y + 14);

  std::string doc = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  doc += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kWidth) + "\" height=\"" +
         num(height) + "\" viewBox=\"0 0 " + num(kWidth) + " " + num(height) +
         "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\" fill=\"#222\">\n";
  doc += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  Svg head;
  head.text(kWidth / 2, 28, picture.title.empty() ? "ferry-dlrm run" : picture.title,
            "text-anchor=\"middle\" font-size=\"17\" font-weight=\"bold\"");
  doc += head.str() + body.str() + "</svg>\n";
  write_file(path, doc);
}

}  // namespace ferry::dlrm_tool
