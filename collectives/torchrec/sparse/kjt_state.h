// Internal (not installed): what a KeyedJaggedTensor holds, and its construction, which checks
// every argument before the state exists (keys, values and weights, the lengths and / or offsets,
// the strides, the inverse indices) so that every accessor can trust it.
#pragma once

#include <ferry/collectives/torchrec/sparse/keyed_jagged_tensor.h>
#include <ferry/runtime/object_pool.h>
#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ferry::torchrec::detail {

// A KJT's per-key lists come from the thread's spare vectors and go back there with the KJT:
// every exchange builds a few KJTs, and each list would otherwise be an allocation of its own.
using SpareLists = ferry::detail::ThreadSpares<std::vector<int64_t>, 16>;

inline std::vector<int64_t> spare_list(size_t n, int64_t value) {
  std::vector<int64_t> v = SpareLists::take();
  v.assign(n, value);
  return v;
}

inline void give_back(std::vector<int64_t>& v) {
  v.clear();
  SpareLists::give(std::move(v));
}

// Immutable after construction except the lazily derived members, which only go from unset to
// set under `mu` (so references handed out stay valid).
struct KjtState {
  KjtState() = default;
  KjtState(const KjtState&) = delete;
  KjtState& operator=(const KjtState&) = delete;
  ~KjtState() {
    give_back(stride_per_key);
    give_back(lengths_offset_per_key);
    if (length_per_key) give_back(*length_per_key);
    if (offset_per_key) give_back(*offset_per_key);
  }

  std::vector<std::string> keys;
  int64_t first_duplicate = -1;  // position of a repeated key, -1 if none
  bool allow_duplicate_keys = false;
  Tensor values, weights;
  int64_t stride = 0;
  bool variable = false;
  std::vector<std::vector<int64_t>> stride_per_key_per_rank;  // given (variable stride per key)
  std::vector<int64_t> stride_per_key;
  std::vector<int64_t> lengths_offset_per_key;
  std::optional<InverseIndices> inverse_indices;

  mutable std::mutex mu;
  mutable Tensor lengths, offsets;  // at least one set at construction
  mutable std::optional<std::vector<int64_t>> length_per_key, offset_per_key;
  // Derived on first use: every exchange builds a KJT, and these cost an allocation per key.
  // (key, position) sorted by key, then position: views of `keys`, in one list (a hash map cost
  // an allocation per key, and a lookup plan asks for every key of every step's batch).
  mutable std::optional<std::vector<std::pair<std::string_view, int64_t>>> index;
  mutable std::optional<std::vector<std::vector<int64_t>>> uniform_stride_per_key_per_rank;
};

// The state of KeyedJaggedTensor(init), errors naming `where`. `checked_length_per_key`: the
// caller's per-key value counts, which it has checked against the lengths itself
// (kjt_with_checked_lengths); the pass over the lengths is then skipped.
std::shared_ptr<KjtState> build_kjt_state(KjtInit in, const char* where,
                                          std::vector<int64_t>* checked_length_per_key = nullptr);

}  // namespace ferry::torchrec::detail
