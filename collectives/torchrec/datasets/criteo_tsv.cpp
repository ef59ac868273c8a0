#include <ferry/collectives/torchrec/datasets/criteo_tsv.h>

#include <ferry/collectives/torchrec/datasets/synthetic_criteo.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>
#include <system_error>
#include <utility>

namespace ferry::torchrec {

namespace {

// Views of the line's tab-separated fields (into `out`, reused from line to line).
void split_tabs(std::string_view line, std::vector<std::string_view>& out) {
  out.clear();
  size_t start = 0;
  for (;;) {
    const size_t tab = line.find('\t', start);
    out.push_back(line.substr(start, tab == std::string_view::npos ? tab : tab - start));
    if (tab == std::string_view::npos) return;
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
  std::vector<std::string_view> fields;
  while (line_ < first + count) {
    do {
      FERRY_CHECK(static_cast<bool>(std::getline(in_, line)), InvalidArgument,
                  "CriteoTsvSource: '", config_.path, "' ended before line ", line_ + 1);
    } while (line.empty());
    const int64_t index = line_++;
    if (index < first) continue;  // another rank's sample
    if (!line.empty() && line.back() == '\r') line.pop_back();
    split_tabs(line, fields);
    FERRY_CHECK(fields.size() == columns, InvalidArgument, "CriteoTsvSource: '", config_.path,
                "' line ", index + 1, " has ", fields.size(), " columns, expected ", columns);
    auto parse = [&](std::string_view text, auto value, int base, const char* what) {
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
      FERRY_CHECK(ec == std::errc() && end == text.data() + text.size() && !text.empty(),
                  InvalidArgument, "CriteoTsvSource: '", config_.path, "' line ", index + 1,
                  ": bad ", what, " '", text, "'");
      return value;
    };
    const int64_t label = parse(fields[0], int64_t{0}, 10, "label");
    FERRY_CHECK(label == 0 || label == 1, InvalidArgument, "CriteoTsvSource: '", config_.path,
                "' line ", index + 1, ": label must be 0 or 1, got ", label);
    for (int64_t i = 0; i < config_.num_dense; ++i) {
      const std::string_view f = fields[static_cast<size_t>(1 + i)];
      const int64_t v = f.empty() ? 0 : parse(f, int64_t{0}, 10, "integer");
      // torchrec's log(v + 3), kept finite below v = -2 (see the header).
      dense[static_cast<size_t>(i)] =
          static_cast<float>(std::log(static_cast<double>(std::max<int64_t>(v, -2)) + 3.0));
    }
    for (int64_t t = 0; t < config_.num_sparse; ++t) {
      const std::string_view f = fields[static_cast<size_t>(1 + config_.num_dense + t)];
      FERRY_CHECK(f.size() <= 16, InvalidArgument, "CriteoTsvSource: '", config_.path,
                  "' line ", index + 1, ": categorical '", f, "' is longer than 16 hex digits");
      const uint64_t v = f.empty() ? 0 : parse(f, uint64_t{0}, 16, "categorical");
      bags[static_cast<size_t>(t)].assign(
          1, static_cast<int64_t>(v % static_cast<uint64_t>(
                                          config_.cardinalities[static_cast<size_t>(t)])));
    }
    builder.add(dense, bags, static_cast<float>(label));
  }
  // Skip the other ranks' batches up to this rank's next one is done lazily by the next call.
  return builder.finish();
}

}  // namespace ferry::torchrec
