#include <ferry/collectives/torchrec/sharding/cw_sharding.h>

#include <algorithm>
#include <numeric>

namespace ferry::torchrec::detail {

std::vector<std::string> unit_names(const std::vector<ShardUnit>& units) {
  std::vector<std::string> keys;
  for (const auto& u : units) keys.push_back(u.key + "@" + std::to_string(u.col_offset));
  return keys;
}

PermutePooledEmbeddingsSplit column_order(const std::vector<ShardUnit>& units) {
  std::vector<int64_t> order(units.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const auto& ua = units[static_cast<size_t>(a)];
    const auto& ub = units[static_cast<size_t>(b)];
    return ua.feature != ub.feature ? ua.feature < ub.feature : ua.col_offset < ub.col_offset;
  });
  std::vector<int64_t> dims;
  for (const auto& u : units) dims.push_back(u.width);
  return PermutePooledEmbeddingsSplit(dims, order);
}

}  // namespace ferry::torchrec::detail
