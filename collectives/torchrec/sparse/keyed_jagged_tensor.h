// ferry::torchrec::KeyedJaggedTensor (KJT): torchrec's sparse-feature batch, one JaggedTensor
// per key (feature) sharing three flat buffers.
//
// Layout (key-major, as torchrec): for keys [f0, f1] and a batch ("stride") of 3 samples,
//
//              sample 0   sample 1   sample 2
//     "f0"     [10, 11]   []         [12]
//     "f1"     [20]       [21]       [22, 23, 24]
//
//   values  = [10, 11, 12, 20, 21, 22, 23, 24]        int64 ids
//   lengths = [2, 0, 1, 1, 1, 3]                        [key][sample], int32 or int64
//   offsets = [0, 2, 2, 3, 4, 5, 8]                     lengths.numel() + 1 entries
//   length_per_key = [3, 5], offset_per_key = [0, 3, 8] (values of each key)
//   weights (optional) = one float32/float64 per value, in the values' order.
//
// Variable batch per key (VBE): with `stride_per_key_per_rank` given, key k has
// stride_per_key[k] = sum(stride_per_key_per_rank[k]) samples (its lengths entries are
// consecutive, ranks in order), variable_stride_per_key() is true and stride() is the largest
// stride_per_key (unless given). Without it every key has stride() samples and
// stride_per_key_per_rank() is [[stride]] per key. `inverse_indices` (VBE only: keys and a [K, B]
// int tensor mapping each key's output sample to one of its deduplicated samples) is carried
// through split / permute unchanged, as torchrec does.
//
// lengths and offsets: give either (or both, then they must agree); the other is derived on
// first use and cached, as are length_per_key and offset_per_key (from_*_sync computes them at
// construction). A KJT is an immutable, cheap handle: copies share the buffers and the caches
// (the lazy derivation is thread-safe). Do not write into the tensors it returns.
//
// Construction validates (ferry's convention; torchrec does not check): values 1-D int64;
// lengths / offsets 1-D int32/int64, no negative length, offsets from 0 and non-decreasing;
// sum(lengths) == values.numel(); weights 1-D float32/float64 with values.numel() elements;
// keys unique (unless allow_duplicate_keys: bucketization and column-wise sharding repeat
// keys); lengths count == keys x stride, or the sum of the per-key strides. Errors are
// InvalidArgument naming the method ("KeyedJaggedTensor::from_lengths_sync: ...") and the
// offending values. values and weights are plain Tensors (ids are not differentiable).
//
// What the KJT all-to-all uses (kjt_dist.h): dist_labels / dist_splits / dist_tensors on the
// sending side, kjt_dist_init on the receiving side; split / concat by key for the input dists.
#pragma once

#include <ferry/collectives/torchrec/sparse/jagged_tensor.h>
#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ferry::torchrec {

class KeyedJaggedTensor;
struct KjtInit;

namespace detail {
struct KjtState;
// For code that has already checked the lengths key by key (none negative, key k's summing to
// length_per_key[k], as the KJT all-to-all does per received segment): the KJT without the
// constructor's second pass over them, its length_per_key already known. Everything else is
// validated as by the constructor, and the counts must add up to the values.
KeyedJaggedTensor kjt_with_checked_lengths(KjtInit init, std::vector<int64_t> length_per_key,
                                           const char* where);
}  // namespace detail

// VBE's inverse indices: `indices` [keys.size(), B] int32/int64, row k for keys[k].
struct InverseIndices {
  std::vector<std::string> keys{};
  Tensor indices{};
};

// The arguments of the general constructor (torchrec's keyword arguments), for designated
// initialisers: KeyedJaggedTensor({.keys = {"f0", "f1"}, .values = v, .lengths = l}).
struct KjtInit {
  std::vector<std::string> keys{};
  Tensor values{};    // 1-D int64
  Tensor weights{};   // optional (undefined = unweighted)
  Tensor lengths{};   // lengths or offsets (or both)
  Tensor offsets{};
  std::optional<int64_t> stride{};  // derived from lengths count / keys when absent
  std::optional<std::vector<std::vector<int64_t>>> stride_per_key_per_rank{};  // VBE
  std::optional<InverseIndices> inverse_indices{};
  bool allow_duplicate_keys = false;
};

class KeyedJaggedTensor {
 public:
  KeyedJaggedTensor();  // = empty()
  explicit KeyedJaggedTensor(KjtInit init);
  // The constructor with `where` naming the caller in error messages (for code built on KJTs,
  // e.g. "kjt_dist_init").
  static KeyedJaggedTensor from_init(KjtInit init, const char* where);

  // torchrec's from_lengths_sync / from_offsets_sync: construct and compute the per-key
  // quantities now.
  static KeyedJaggedTensor from_lengths_sync(
      std::vector<std::string> keys, Tensor values, Tensor lengths, Tensor weights = {},
      std::optional<int64_t> stride = std::nullopt,
      std::optional<std::vector<std::vector<int64_t>>> stride_per_key_per_rank = std::nullopt,
      std::optional<InverseIndices> inverse_indices = std::nullopt);
  static KeyedJaggedTensor from_offsets_sync(
      std::vector<std::string> keys, Tensor values, Tensor offsets, Tensor weights = {},
      std::optional<int64_t> stride = std::nullopt,
      std::optional<std::vector<std::vector<int64_t>>> stride_per_key_per_rank = std::nullopt,
      std::optional<InverseIndices> inverse_indices = std::nullopt);
  // No keys, no values, stride 0.
  static KeyedJaggedTensor empty(bool weighted = false, DType weights_dtype = DType::Float32,
                                 DType lengths_dtype = DType::Int64);
  // Keys, lengths, values and weights of the list concatenated in order. All weighted or all
  // unweighted, with the same lengths and weights dtypes. The result has a variable stride per
  // key when any input has; otherwise every input with keys must have the same stride (inputs
  // without keys are ignored for that). Keys must stay unique unless an input allows duplicates.
  static KeyedJaggedTensor concat(const std::vector<KeyedJaggedTensor>& kjts);

  const std::vector<std::string>& keys() const;
  int64_t num_keys() const;
  bool keys_unique() const;  // no key repeats (access by key is then never ambiguous)
  const Tensor& values() const;
  bool has_weights() const;
  const Tensor& weights() const;          // throws InvalidArgument when unweighted
  const Tensor& weights_or_none() const;  // undefined when unweighted
  Tensor lengths() const;  // derived from offsets on first use when not given
  Tensor offsets() const;  // derived from lengths on first use when not given
  bool allows_duplicate_keys() const;

  int64_t stride() const;
  const std::vector<int64_t>& stride_per_key() const;
  const std::vector<std::vector<int64_t>>& stride_per_key_per_rank() const;
  bool variable_stride_per_key() const;
  const std::optional<InverseIndices>& inverse_indices() const;

  // Computed on first use and kept (they never change once computed): the references stay
  // valid while this KJT, or a copy of it, lives.
  const std::vector<int64_t>& length_per_key() const;  // values per key
  const std::vector<int64_t>& offset_per_key() const;  // K+1 entries: [0, cumsum(length_per_key)]
  // K+1 entries: where each key's lengths start ([0, cumsum(stride_per_key)]).
  const std::vector<int64_t>& lengths_offset_per_key() const;
  // key -> index; throws when keys repeat (the map would be ambiguous).
  std::map<std::string, int64_t> index_per_key() const;
  int64_t key_index(const std::string& key) const;  // throws for unknown / repeated keys
  // Computes every lazy quantity now (torchrec's sync); returns *this.
  const KeyedJaggedTensor& sync() const;

  // The key's JaggedTensor: views of this KJT's values / lengths / weights (its offsets are
  // new, starting at 0). Throws for an unknown key (naming the keys) or a repeated one.
  JaggedTensor operator[](const std::string& key) const;
  std::map<std::string, JaggedTensor> to_dict() const;

  // Consecutive groups of segments[i] keys (sum(segments) == num_keys(); 0 allowed). Values,
  // lengths and weights of each part are views of this KJT's buffers; stride kept.
  std::vector<KeyedJaggedTensor> split(const std::vector<int64_t>& segments) const;
  // Keys reordered: key i of the result is key indices[i] of this one. Indices may repeat (the
  // result then allows duplicate keys) or leave keys out. Copies values, lengths and weights.
  KeyedJaggedTensor permute(const std::vector<int64_t>& indices) const;

 private:
  friend KeyedJaggedTensor detail::kjt_with_checked_lengths(KjtInit, std::vector<int64_t>,
                                                            const char*);
  explicit KeyedJaggedTensor(std::shared_ptr<const detail::KjtState> s) : s_(std::move(s)) {}

  std::shared_ptr<const detail::KjtState> s_;
};

std::ostream& operator<<(std::ostream& os, const KeyedJaggedTensor& kjt);

}  // namespace ferry::torchrec
