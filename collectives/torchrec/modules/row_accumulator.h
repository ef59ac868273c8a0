// A table's sparse gradient accumulated by row, for the fused sparse backward (internal to the
// embedding lookups).
#pragma once

#include <ferry/collectives/torchrec/modules/sparse_row_gradient.h>
#include <ferry/runtime/object_pool.h>
#include <ferry/runtime/tensor.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

namespace ferry::torchrec::detail {

// One table's gradient, accumulated by local row, in two passes: the first gives each distinct
// row a slot in order of first occurrence (add_row), the second adds each occurrence into its
// row's slot in occurrence order (row), so the sums are those of a plain loop
// `dense[r] += contribution`, bit for bit, without sorting the occurrences. The slot of a row
// is found through an array indexed by row for shards of up to kDirectRows rows (one load, and
// the first pass needs no branch on whether the row is new; only the entries used are reset
// afterwards), and through an open-addressing hash table sized by the batch's ids for larger
// shards (whose row-indexed array would be too large to keep per thread). The buffers are kept
// per thread across steps.
template <class T>
class RowAccumulator {
 public:
  static constexpr int64_t kDirectRows = int64_t{1} << 22;  // 16 MiB of slots

  // Starts a table of `rows` local rows and `cols` columns that at most `ids` occurrences will
  // touch.
  void begin(int64_t ids, int64_t rows, int64_t cols) {
    if (direct_) {
      for (size_t k = 0; k < count_; ++k) slot_of_row_[static_cast<size_t>(rows_[k])] = -1;
    }
    direct_ = rows <= kDirectRows;
    if (direct_) {
      if (slot_of_row_.size() < static_cast<size_t>(rows))
        slot_of_row_.resize(static_cast<size_t>(rows), -1);
    } else {
      size_t capacity = 16;
      while (capacity < 2 * static_cast<size_t>(ids)) capacity *= 2;
      keys_.assign(capacity, -1);
      slots_.resize(capacity);
      mask_ = capacity - 1;
    }
    cols_ = cols;
    table_rows_ = rows;
    count_ = 0;
    if (rows_.size() < static_cast<size_t>(ids)) rows_.resize(static_cast<size_t>(ids));
  }
  // First pass: row r occurs (at most `ids` calls in all).
  void add_row(int64_t r) {
    if (direct_) {
      // Written whether or not r is new, so that the first pass has no branch to mispredict
      // (about every other occurrence is a row's first in a batch).
      int32_t& s = slot_of_row_[static_cast<size_t>(r)];
      const bool fresh = s < 0;
      s = fresh ? static_cast<int32_t>(count_) : s;
      rows_[count_] = r;
      count_ += fresh ? 1 : 0;
      return;
    }
    // Fibonacci hashing spreads consecutive rows; linear probing finds r or an empty entry
    // (the table is at most half full).
    const uint64_t mixed = static_cast<uint64_t>(r) * 0x9e3779b97f4a7c15ULL;
    size_t h = static_cast<size_t>(mixed >> 32) & mask_;
    while (keys_[h] != r && keys_[h] != -1) h = (h + 1) & mask_;
    if (keys_[h] == -1) {
      keys_[h] = r;
      slots_[h] = static_cast<int32_t>(count_);
      rows_[count_++] = r;
    }
  }
  // Between the passes: every slot's accumulator set to zero.
  void zero_values() { values_.assign(count_ * static_cast<size_t>(cols_), T(0)); }
  // Second pass: row r's accumulator (cols values); r was given to add_row.
  T* row(int64_t r) {
    if (direct_) return values_.data() + slot_of_row_[static_cast<size_t>(r)] * cols_;
    const uint64_t mixed = static_cast<uint64_t>(r) * 0x9e3779b97f4a7c15ULL;
    size_t h = static_cast<size_t>(mixed >> 32) & mask_;
    while (keys_[h] != r) h = (h + 1) & mask_;
    return values_.data() + slots_[h] * cols_;
  }
  std::span<const int64_t> rows() const { return {rows_.data(), count_}; }
  std::span<const T> values() const { return values_; }
  // The non-fused path's SparseRowGradient: the rows sorted, as its contract wants. In the
  // direct form, a walk over the slots by row when the table is not much larger than its rows
  // touched (no comparisons), else a sort of (row, slot) packed in one integer (rows there are
  // below 2^22); the hash form sorts by row through the slots.
  SparseRowGradient sorted(DType dtype) const {
    ferry::detail::ScopedSpare<std::vector<int64_t>> order_list;  // kept by the thread
    std::vector<int64_t>& order = *order_list;  // slots in row order
    order.clear();
    if (direct_ && table_rows_ <= 8 * static_cast<int64_t>(count_) + 64) {
      for (int64_t r = 0; r < table_rows_; ++r) {
        const int32_t slot = slot_of_row_[static_cast<size_t>(r)];
        if (slot >= 0) order.push_back(slot);
      }
    } else if (direct_) {
      for (size_t k = 0; k < count_; ++k)
        order.push_back(static_cast<int64_t>((static_cast<uint64_t>(rows_[k]) << 32) | k));
      std::sort(order.begin(), order.end());
      for (int64_t& o : order) o &= int64_t{0xffffffff};
    } else {
      order.resize(count_);
      std::iota(order.begin(), order.end(), int64_t{0});
      std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return rows_[static_cast<size_t>(a)] < rows_[static_cast<size_t>(b)];
      });
    }
    Tensor rows = empty({static_cast<int64_t>(order.size())}, DType::Int64);
    Tensor values = empty({static_cast<int64_t>(order.size()), cols_}, dtype);
    int64_t* to_row = rows.data<int64_t>();
    T* to_values = values.data<T>();
    const auto cols = static_cast<size_t>(cols_);
    for (size_t k = 0; k < order.size(); ++k) {
      const auto from = static_cast<size_t>(order[k]);
      to_row[k] = rows_[from];
      std::copy_n(values_.data() + from * cols, cols, to_values + k * cols);
    }
    return SparseRowGradient(std::move(rows), std::move(values));
  }

 private:
  bool direct_ = false;
  std::vector<int32_t> slot_of_row_;  // by local row: its slot, or -1 (direct form)
  std::vector<int64_t> keys_;   // hash table: the row, or -1 for an empty entry
  std::vector<int32_t> slots_;  // hash table: the row's slot
  size_t mask_ = 0;
  std::vector<int64_t> rows_;   // by slot; the first count_ are this table's
  size_t count_ = 0;
  std::vector<T> values_;       // by slot, cols_ each
  int64_t cols_ = 0;
  int64_t table_rows_ = 0;
};

// Out of line: GCC otherwise recomputes a thread_local's address (a call into the TLS
// resolver in a shared library) at each use inside the loops that use it.
template <class T>
[[gnu::noinline]] RowAccumulator<T>* row_accumulator() {
  thread_local RowAccumulator<T> accumulator;
  return &accumulator;
}

}  // namespace ferry::torchrec::detail
