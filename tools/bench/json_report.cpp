#include "tools/bench/json_report.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <sstream>
#include <unistd.h>

namespace ferry::bench {
namespace {

std::string quoted(const std::string& s) {
  // Appended rather than "\"" + ... + "\"": GCC 12 warns (-Wrestrict) falsely on that form.
  std::string out(1, '"');
  out += json_escape(s);
  out += '"';
  return out;
}

// JSON has no inf or nan: a time that could not be measured is null.
std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string stats(const Stats& s) {
  return "{\"median\": " + number(s.median * 1e6) + ", \"min\": " + number(s.min * 1e6) +
         ", \"max\": " + number(s.max * 1e6) + "}";
}

void settings(std::ostringstream& os, const JsonRun& run) {
  const Options& o = run.opts;
  os << "  \"settings\": {\n";
  os << "    \"transport\": " << quoted(o.transport) << ",\n";
  os << "    \"world_size\": " << o.world_size << ",\n";
  os << "    \"dtype\": " << quoted(dtype_name(o.dtype)) << ",\n";
  os << "    \"ops\": [";
  for (size_t i = 0; i < o.ops.size(); ++i) os << (i ? ", " : "") << quoted(op_name(o.ops[i]));
  os << "],\n    \"sizes\": [";
  for (size_t i = 0; i < run.sizes.size(); ++i) os << (i ? ", " : "") << run.sizes[i];
  os << "],\n";
  os << "    \"iters\": " << (o.iters == 0 ? std::string("\"auto\"") : std::to_string(o.iters))
     << ",\n";
  os << "    \"warmup\": " << o.warmup << ",\n";
  os << "    \"place\": "
     << quoted(o.out_of_place && o.in_place ? "both" : o.in_place ? "in" : "out") << ",\n";
  os << "    \"memory\": "
     << quoted(o.private_memory && o.shared_memory ? "both"
               : o.shared_memory                   ? "shared"
                                                   : "private")
     << ",\n";
  os << "    \"vs_mpi\": " << (o.vs_mpi ? "true" : "false") << ",\n";
  os << "    \"mpi_nonblocking\": " << (o.mpi_nonblocking ? "true" : "false") << ",\n";
  os << "    \"differentiable\": " << (o.differentiable ? "true" : "false") << ",\n";
  os << "    \"algo\": " << quoted(o.algo) << ",\n";
  os << "    \"algorithm_table\": [";
  std::istringstream lines(run.algorithm_table);
  bool first = true;
  for (std::string line; std::getline(lines, line);) {
    os << (first ? "" : ", ") << quoted(line);
    first = false;
  }
  os << "]\n  },\n";
}

void row(std::ostringstream& os, const Row& r) {
  os << "    {\"op\": " << quoted(op_name(r.op)) << ", \"place\": " << quoted(place_name(r.place))
     << ", \"bytes\": " << r.bytes << ", \"count\": " << r.count
     << ", \"algorithm\": " << quoted(r.algorithm) << ", \"iters\": " << r.iters
     << ", \"time_us\": " << stats(r.time) << ", \"algbw_gbps\": " << number(r.algbw_gbps)
     << ", \"busbw_gbps\": " << number(r.busbw_gbps)
     << ", \"wrong\": " << (r.wrong < 0 ? std::string("null") : std::to_string(r.wrong));
  if (r.ideal_us > 0)
    os << ", \"ideal_us\": " << number(r.ideal_us)
       << ", \"x_ideal\": " << number(r.time.median * 1e6 / r.ideal_us);
  if (r.now_ideal_us > 0) os << ", \"x_now\": " << number(r.time.median * 1e6 / r.now_ideal_us);
  if (r.baseline) {
    const double ratio = r.baseline->median > 0 ? r.time.median / r.baseline->median : NAN;
    os << ", \"baseline_time_us\": " << stats(*r.baseline) << ", \"ratio\": " << number(ratio);
  }
  os << "}";
}

}  // namespace

std::string json_escape(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

std::string bench_json(const JsonRun& run) {
  const BuildInfo& build = build_info();
  std::ostringstream os;
  os << "{\n";
  os << "  \"tool\": \"ferry-bench\",\n";
  os << "  \"format\": 1,\n";  // bumped when a field changes meaning
  os << "  \"version\": " << quoted(version()) << ",\n";
  os << "  \"build\": {\"compiler\": " << quoted(build.compiler)
     << ", \"build_type\": " << quoted(build.build_type) << ", \"mpi\": " << quoted(build.mpi)
     << ", \"ucx\": " << quoted(build.ucx) << "},\n";
  os << "  \"host\": " << quoted(host_name()) << ",\n";
  os << "  \"date\": " << quoted(utc_now()) << ",\n";
  os << "  \"time_unit\": \"us\", \"bandwidth_unit\": \"GB/s (1e9 B/s)\",\n";
  settings(os, run);
  os << "  \"rows\": [\n";
  for (size_t i = 0; i < run.rows.size(); ++i) {
    row(os, run.rows[i]);
    os << (i + 1 < run.rows.size() ? ",\n" : "\n");
  }
  os << "  ],\n";
  os << "  \"ok\": " << (run.ok ? "true" : "false") << "\n";
  os << "}\n";
  return os.str();
}

void write_bench_json(const std::string& path, const JsonRun& run) {
  const std::string text = bench_json(run);
  std::FILE* f = std::fopen(path.c_str(), "w");
  FERRY_CHECK(f != nullptr, InvalidArgument, "--json: cannot write '", path,
              "': ", std::strerror(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int saved = errno;
  const bool closed = std::fclose(f) == 0;
  FERRY_CHECK(written && closed, InvalidArgument, "--json: error writing '", path,
              "': ", std::strerror(written ? errno : saved));
}

}  // namespace ferry::bench
