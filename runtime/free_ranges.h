// Free ranges of a few large regions, handed out best-fit and merged again when given back
// (internal): the block placement of the shared arena (shared_arena.h), apart from its memory
// so that it can be tested on its own.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <vector>

namespace ferry::detail {

class FreeRanges {
 public:
  struct Place {
    size_t region;
    size_t offset;
  };

  // Adds region `region` (0, 1, ... in order) of `bytes`, all free.
  void add_region(size_t region, size_t bytes);
  // The start of the smallest free range that holds `bytes` (its rest stays free), or none.
  std::optional<Place> take(size_t bytes);
  // A free range: where it starts and its bytes.
  struct Range {
    Place at;
    size_t bytes;
  };
  // Gives back `bytes` at `at`, taken before; merged with the free ranges on either side.
  // Returns the free range it is now part of.
  Range give(Place at, size_t bytes);
  // Free ranges, in all regions (tests).
  size_t ranges() const { return by_size_.size(); }
  // Calls f(region, offset, bytes) for every free range.
  template <class F>
  void for_each(F&& f) const {
    for (size_t region = 0; region < by_offset_.size(); ++region)
      for (const auto& [offset, bytes] : by_offset_[region]) f(region, offset, bytes);
  }

 private:
  void add(size_t region, size_t offset, size_t bytes);
  void erase(size_t region, std::map<size_t, size_t>::iterator it);

  std::vector<std::map<size_t, size_t>> by_offset_;  // by region: offset -> bytes
  std::multimap<size_t, Place> by_size_;             // bytes -> where
};

}  // namespace ferry::detail
