// ferry-dlrm --svg (tools/dlrm/run_picture.h): the picture of a synthetic run and of the edge
// cases (one step, no epochs, unknown compute limit, non-finite values) is well-formed SVG with
// tick values and the threshold written out, and never holds "nan" or "inf". With
// FERRY_KEEP_SVG=DIR the pictures stay in DIR to be looked at.
#include "tools/dlrm/run_picture.h"

#include <ferry/runtime/error.h>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

using ferry::dlrm_tool::EpochRecord;
using ferry::dlrm_tool::RunPicture;
using ferry::dlrm_tool::write_svg;

namespace {

std::filesystem::path out_dir() {
  if (const char* keep = std::getenv("FERRY_KEEP_SVG"); keep != nullptr && *keep != '\0') {
    std::filesystem::create_directories(keep);
    return keep;
  }
  const auto dir = std::filesystem::temp_directory_path() /
                   ("ferry-run-picture-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

// Writes the picture, reads it back and removes it unless it is to be kept.
std::string render(const RunPicture& p, const std::string& name) {
  const bool keep = std::getenv("FERRY_KEEP_SVG") != nullptr;
  const std::filesystem::path dir = out_dir();
  const std::string path = (dir / (name + ".svg")).string();
  write_svg(path, p);
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!keep) {
    std::filesystem::remove(path);
    std::error_code ec;
    std::filesystem::remove(dir, ec);  // only once empty
  }
  return ss.str();
}

// Empty if the text is well-formed for our purposes (tags balanced and properly nested, quotes
// even inside tags, every '&' an entity, one <svg> root); otherwise what is wrong.
std::string xml_problem(const std::string& s) {
  std::vector<std::string> open;
  int roots = 0;
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '&') {
      const size_t semi = s.find(';', i);
      if (semi == std::string::npos || semi - i > 8) return "bare & at " + std::to_string(i);
      for (size_t j = i + 1; j < semi; ++j)
        if (!std::isalnum(static_cast<unsigned char>(s[j])) && s[j] != '#')
          return "bad entity at " + std::to_string(i);
      i = semi + 1;
      continue;
    }
    if (s[i] == '>') return "stray > at " + std::to_string(i);
    if (s[i] != '<') {
      ++i;
      continue;
    }
    const size_t end = s.find('>', i);
    if (end == std::string::npos) return "unterminated tag at " + std::to_string(i);
    const std::string tag = s.substr(i + 1, end - i - 1);
    i = end + 1;
    if (std::count(tag.begin(), tag.end(), '"') % 2 != 0) return "odd quotes in <" + tag + ">";
    if (tag.front() == '?') continue;  // the XML declaration
    if (tag.front() == '/') {
      const std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) return "</" + name + "> closes nothing open";
      open.pop_back();
      continue;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" \n/"));
    if (open.empty()) {
      if (name != "svg") return "root element <" + name + ">";
      ++roots;
    }
    if (tag.back() != '/') open.push_back(name);
  }
  if (!open.empty()) return "<" + open.back() + "> never closed";
  if (roots != 1) return std::to_string(roots) + " root elements";
  return "";
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

void check_clean(const std::string& svg) {
  INFO(svg.substr(0, 400));
  CHECK(xml_problem(svg) == "");
  std::string lower = svg;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  CHECK_FALSE(has(lower, "nan"));
  CHECK_FALSE(has(lower, "inf"));
  CHECK_FALSE(has(svg, "<script"));
  CHECK_FALSE(has(svg, "url("));  // no external fonts or images
}

// A run like ferry-dlrm's: 300 steps in 3 epochs, a falling noisy loss, 9 stages (some tiny).
RunPicture synthetic() {
  RunPicture p;
  p.title = "ferry-dlrm: 2 ranks, sparse-dist pipeline, sharding table_wise";
  uint32_t state = 12345;
  for (int i = 0; i < 300; ++i) {
    state = state * 1664525u + 1013904223u;
    const double noise = (static_cast<double>(state >> 8) / (1u << 24) - 0.5) * 0.08;
    p.step_loss.push_back(0.45 + 0.25 * std::exp(-i / 60.0) + noise);
  }
  p.epoch_end_steps = {100, 200, 300};
  p.epochs = {{0.55, 0.50, 0.69}, {0.48, 0.47, 0.73}, {0.46, 0.465, 0.745}};
  p.auc_threshold = 0.712;
  p.stages = {{"data", 0.21},          {"agreement", 0.05},  {"input dist", 0.9},
              {"lookup + output dist", 2.4}, {"dense forward", 3.1}, {"backward", 4.2},
              {"grad all_reduce", 1.3}, {"dense optimizer", 0.4}, {"data_parallel tables", 0.02}};
  p.step_ms = 12.3;
  p.compute_limit_ms = 0.82;
  return p;
}

}  // namespace

TEST_CASE("run picture: a synthetic run shows ticks, epochs, the threshold and the limit") {
  const std::string svg = render(synthetic(), "synthetic");
  check_clean(svg);
  CHECK(has(svg, "threshold 0.712"));
  for (const char* label : {">epoch 1<", ">epoch 2<", ">epoch 3<", ">0<", ">100<", ">300<",
                            ">step<", ">loss<", ">AUC<", ">ms<"})
    CHECK(has(svg, label));
  CHECK(has(svg, "step 12.3 ms = 15\u00d7 the compute limit (0.82 ms"));
  CHECK(has(svg, ">lookup + output dist<"));
  CHECK(has(svg, ">data_parallel tables<"));
  CHECK(has(svg, "smoothed"));
  CHECK(has(svg, "width=\"1100.0\""));
}

TEST_CASE("run picture: text is escaped for XML") {
  RunPicture p = synthetic();
  p.title = "a & b <c> \"d\"";
  p.stages.push_back({"x<y & z>w", 0.1});
  const std::string svg = render(p, "escaped");
  check_clean(svg);
  CHECK(has(svg, "a &amp; b &lt;c&gt; &quot;d&quot;"));
  CHECK(has(svg, "x&lt;y &amp; z&gt;w"));
}

TEST_CASE("run picture: edge cases write a clean file") {
  SECTION("one step, one epoch") {
    RunPicture p;
    p.step_loss = {0.69};
    p.epoch_end_steps = {1};
    p.epochs = {{0.69, 0.68, 0.6}};
    p.auc_threshold = 0.712;
    p.stages = {{"data", 1.0}};
    p.step_ms = 1.0;
    p.compute_limit_ms = 0.5;
    const std::string svg = render(p, "one_step");
    check_clean(svg);
    CHECK(has(svg, "threshold 0.712"));
    CHECK(has(svg, ">epoch 1<"));
  }
  SECTION("no steps, no epochs, no stages, limit unknown") {
    RunPicture p;
    p.auc_threshold = 0.7;
    const std::string svg = render(p, "empty");
    check_clean(svg);
    CHECK(has(svg, "threshold 0.700"));
    CHECK(has(svg, "compute limit unknown"));
    CHECK(has(svg, "no epochs"));
    CHECK(has(svg, "no stage times"));
  }
  SECTION("zero and constant losses") {
    RunPicture p = synthetic();
    std::fill(p.step_loss.begin(), p.step_loss.end(), 0.0);
    for (EpochRecord& e : p.epochs) e.test_loss = 0;
    check_clean(render(p, "zero_loss"));
    std::fill(p.step_loss.begin(), p.step_loss.end(), 0.5);
    for (EpochRecord& e : p.epochs) e = {0.5, 0.5, 0.712};
    p.compute_limit_ms = 0;
    const std::string svg = render(p, "constant_loss");
    check_clean(svg);
    CHECK(has(svg, "compute limit unknown"));
  }
  SECTION("non-finite values are left out") {
    RunPicture p = synthetic();
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    p.step_loss[10] = nan;
    p.step_loss[11] = inf;
    p.epochs[1].auc = nan;
    p.epochs[2].test_loss = -inf;
    p.stages[3].second = nan;
    p.compute_limit_ms = nan;
    check_clean(render(p, "non_finite"));
  }
  SECTION("epochs without recorded ends, negative stages") {
    RunPicture p = synthetic();
    p.epoch_end_steps.clear();
    p.stages[0].second = -1;
    check_clean(render(p, "no_ends"));
  }
  SECTION("a long run stays small") {
    RunPicture p = synthetic();
    p.step_loss.clear();
    for (int i = 0; i < 200000; ++i) p.step_loss.push_back(0.5 + 0.2 * std::sin(i * 0.01));
    p.epoch_end_steps = {50000, 100000, 150000, 200000};
    p.epochs.push_back({0.45, 0.45, 0.75});
    const std::string svg = render(p, "long_run");
    check_clean(svg);
    CHECK(svg.size() < 200000);
    CHECK(has(svg, ">epoch 4<"));
  }
  SECTION("many epochs") {
    RunPicture p = synthetic();
    p.epochs.clear();
    p.epoch_end_steps.clear();
    for (int k = 0; k < 40; ++k) {
      p.epochs.push_back({0.5, 0.5 - 0.001 * k, 0.7 + 0.001 * k});
      p.epoch_end_steps.push_back(static_cast<int64_t>(300 * (k + 1) / 40));
    }
    check_clean(render(p, "many_epochs"));
  }
}

TEST_CASE("run picture: an unwritable path is an InvalidArgument naming it") {
  const std::string path = "/nonexistent-ferry-dir/run.svg";
  try {
    write_svg(path, synthetic());
    FAIL("no exception");
  } catch (const ferry::InvalidArgument& e) {
    CHECK(has(e.what(), path));
  }
}
