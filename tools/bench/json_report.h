// ferry-bench --json: the run as one JSON document (version, host, settings, every row), for a
// script or notebook to keep and plot (tools/plot_bench.py) without parsing the table.
#pragma once

#include "tools/bench/options.h"
#include "tools/bench/report.h"

#include <string>
#include <vector>

namespace ferry::bench {

struct JsonRun {
  const Options& opts;
  std::vector<size_t> sizes;
  std::string algorithm_table;  // as printed in the header, one line per op
  const std::vector<Row>& rows;
  bool ok;  // no check failed, no #wrong, no runtime error
};

// The document as text; json_escape is exposed for the test of odd host or path names.
std::string bench_json(const JsonRun& run);
std::string json_escape(const std::string& text);

// Writes bench_json(run) to `path`; throws ferry::InvalidArgument naming the path and errno's
// text when it cannot.
void write_bench_json(const std::string& path, const JsonRun& run);

}  // namespace ferry::bench
