#include <ferry/collectives/torchrec/datasets/criteo_tsv.h>

#include <ferry/collectives/torchrec/datasets/synthetic_criteo.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>

namespace ferry::torchrec {

namespace {

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t tab = line.find('\t', start);
    out.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) return out;
    start = tab + 1;
  }
}

}  // namespace

CriteoTsvSource::CriteoTsvSource(CriteoTsvConfig config, const ShardOptions& options)
    : config_(std::move(config)), options_(options) {
  if (config_.cardinalities.empty()) {
    config_.cardinalities = default_cardinalities(config_.num_sparse);
  }
  FERRY_CHECK(config_.num_dense >= 0 && config_.num_sparse >= 1 &&
                  static_cast<int64_t>(config_.cardinalities.size()) == config_.num_sparse,
              InvalidArgument, "CriteoTsvSource: need num_dense >= 0, num_sparse >= 1 and one "
              "cardinality per sparse feature (got ", config_.cardinalities.size(), " for ",
              config_.num_sparse, ")");
  for (int64_t c : config_.cardinalities) {
    FERRY_CHECK(c >= 1, InvalidArgument, "CriteoTsvSource: cardinality ", c, " < 1");
  }
  std::ifstream count(config_.path);
  FERRY_CHECK(count.good(), InvalidArgument, "CriteoTsvSource: cannot open '", config_.path,
              "'");
  std::string line;
  while (std::getline(count, line)) {
    if (!line.empty()) ++lines_;
  }
  schedule_.emplace(lines_, options_);
  reset();
}

void CriteoTsvSource::reset() {
  in_ = std::ifstream(config_.path);
  FERRY_CHECK(in_.good(), InvalidArgument, "CriteoTsvSource: cannot open '", config_.path, "'");
  line_ = 0;
  next_ = 0;
}

std::optional<Batch> CriteoTsvSource::next_batch() {
  if (next_ >= schedule_->num_batches()) return std::nullopt;
  const int64_t first = schedule_->first_sample(next_);
  const int64_t count = schedule_->batch_size(next_);
  ++next_;
  detail::BatchBuilder builder(config_.num_dense, criteo_sparse_keys(config_.num_sparse), count);
  std::string line;
  const auto columns = static_cast<size_t>(1 + config_.num_dense + config_.num_sparse);
  std::vector<float> dense(static_cast<size_t>(config_.num_dense));
  std::vector<std::vector<int64_t>> bags(static_cast<size_t>(config_.num_sparse));
  while (line_ < first + count) {
    do {
      FERRY_CHECK(static_cast<bool>(std::getline(in_, line)), InvalidArgument,
                  "CriteoTsvSource: '", config_.path, "' ended before line ", line_ + 1);
    } while (line.empty());
    const int64_t index = line_++;
    if (index < first) continue;  // another rank's sample
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::vector<std::string> fields = split_tabs(line);
    FERRY_CHECK(fields.size() == columns, InvalidArgument, "CriteoTsvSource: '", config_.path,
                "' line ", index + 1, " has ", fields.size(), " columns, expected ", columns);
    auto parse_int = [&](const std::string& text, int base, const char* what) {
      errno = 0;
      char* end = nullptr;
      const long long v = base == 16 ? static_cast<long long>(std::strtoull(text.c_str(), &end, 16))
                                     : std::strtoll(text.c_str(), &end, 10);
      FERRY_CHECK(errno == 0 && end != text.c_str() && *end == '\0', InvalidArgument,
                  "CriteoTsvSource: '", config_.path, "' line ", index + 1, ": bad ", what,
                  " '", text, "'");
      return v;
    };
    const long long label = parse_int(fields[0], 10, "label");
    FERRY_CHECK(label == 0 || label == 1, InvalidArgument, "CriteoTsvSource: '", config_.path,
                "' line ", index + 1, ": label must be 0 or 1, got ", label);
    for (int64_t i = 0; i < config_.num_dense; ++i) {
      const std::string& f = fields[static_cast<size_t>(1 + i)];
      const double v = f.empty() ? 0.0 : static_cast<double>(parse_int(f, 10, "integer"));
      dense[static_cast<size_t>(i)] = static_cast<float>(std::log1p(std::max(v, 0.0)));
    }
    for (int64_t t = 0; t < config_.num_sparse; ++t) {
      const std::string& f = fields[static_cast<size_t>(1 + config_.num_dense + t)];
      std::vector<int64_t>& bag = bags[static_cast<size_t>(t)];
      bag.clear();
      if (f.empty()) continue;
      FERRY_CHECK(f.size() <= 16, InvalidArgument, "CriteoTsvSource: '", config_.path,
                  "' line ", index + 1, ": categorical '", f, "' is longer than 16 hex digits");
      const auto v = static_cast<unsigned long long>(parse_int(f, 16, "categorical"));
      bag.push_back(static_cast<int64_t>(
          v % static_cast<unsigned long long>(config_.cardinalities[static_cast<size_t>(t)])));
    }
    builder.add(dense, bags, static_cast<float>(label));
  }
  // Skip the other ranks' batches up to this rank's next one is done lazily by the next call.
  return builder.finish();
}

}  // namespace ferry::torchrec
