#include <ferry/runtime/free_ranges.h>

#include <iterator>

namespace ferry::detail {

void FreeRanges::add_region(size_t region, size_t bytes) {
  if (by_offset_.size() <= region) by_offset_.resize(region + 1);
  add(region, 0, bytes);
}

std::optional<FreeRanges::Place> FreeRanges::take(size_t bytes) {
  const auto fit = by_size_.lower_bound(bytes);
  if (fit == by_size_.end()) return std::nullopt;
  const size_t have = fit->first;
  const Place at = fit->second;
  by_size_.erase(fit);
  by_offset_[at.region].erase(at.offset);
  if (have > bytes) add(at.region, at.offset + bytes, have - bytes);
  return at;
}

FreeRanges::Range FreeRanges::give(Place at, size_t bytes) {
  std::map<size_t, size_t>& ranges = by_offset_[at.region];
  size_t offset = at.offset;
  auto next = ranges.lower_bound(offset);
  if (next != ranges.begin()) {
    auto before = std::prev(next);
    if (before->first + before->second == offset) {
      offset = before->first;
      bytes += before->second;
      erase(at.region, before);
    }
  }
  if (next != ranges.end() && next->first == offset + bytes) {
    bytes += next->second;
    erase(at.region, next);
  }
  add(at.region, offset, bytes);
  return Range{Place{at.region, offset}, bytes};
}

void FreeRanges::add(size_t region, size_t offset, size_t bytes) {
  by_offset_[region].emplace(offset, bytes);
  by_size_.emplace(bytes, Place{region, offset});
}

void FreeRanges::erase(size_t region, std::map<size_t, size_t>::iterator it) {
  auto [first, last] = by_size_.equal_range(it->second);
  for (auto s = first; s != last; ++s) {
    if (s->second.region == region && s->second.offset == it->first) {
      by_size_.erase(s);
      break;
    }
  }
  by_offset_[region].erase(it);
}

}  // namespace ferry::detail
