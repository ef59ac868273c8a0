#include <ferry/collectives/torchrec/sparse/keyed_jagged_tensor.h>

#include <ferry/collectives/torchrec/sparse/jagged_kernels.h>
#include <ferry/collectives/torchrec/sparse/kjt_state.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <mutex>
#include <ostream>
#include <map>
#include <string_view>
#include <utility>

namespace ferry::torchrec {

namespace {

using detail::list_str;

constexpr const char* kCtor = "KeyedJaggedTensor";

using KeyIndex = std::vector<std::pair<std::string_view, int64_t>>;

// (key, position) sorted by key then position, built on first use.
const KeyIndex& index_of(const detail::KjtState& s) {
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.index) {
    KeyIndex& index = s.index.emplace();
    index.reserve(s.keys.size());
    for (size_t k = 0; k < s.keys.size(); ++k) index.emplace_back(s.keys[k], static_cast<int64_t>(k));
    std::sort(index.begin(), index.end());
  }
  return *s.index;
}

// The first position of `key`, or -1.
int64_t first_position(const KeyIndex& index, std::string_view key) {
  auto it = std::lower_bound(index.begin(), index.end(), key,
                             [](const auto& entry, std::string_view k) { return entry.first < k; });
  return it != index.end() && it->first == key ? it->second : -1;
}

}  // namespace

KeyedJaggedTensor::KeyedJaggedTensor() : KeyedJaggedTensor(empty()) {}

KeyedJaggedTensor::KeyedJaggedTensor(KjtInit init)
    : s_(detail::build_kjt_state(std::move(init), kCtor)) {}

KeyedJaggedTensor KeyedJaggedTensor::from_init(KjtInit init, const char* where) {
  return KeyedJaggedTensor(detail::build_kjt_state(std::move(init), where));
}

KeyedJaggedTensor detail::kjt_with_checked_lengths(KjtInit init,
                                                   std::vector<int64_t> length_per_key,
                                                   const char* where) {
  return KeyedJaggedTensor(detail::build_kjt_state(std::move(init), where, &length_per_key));
}

KeyedJaggedTensor KeyedJaggedTensor::from_lengths_sync(
    std::vector<std::string> keys, Tensor values, Tensor lengths, Tensor weights,
    std::optional<int64_t> stride, std::optional<std::vector<std::vector<int64_t>>> sppkr,
    std::optional<InverseIndices> inverse_indices) {
  constexpr const char* where = "KeyedJaggedTensor::from_lengths_sync";
  FERRY_CHECK(lengths.defined(), InvalidArgument, where, ": lengths is undefined");
  KeyedJaggedTensor kjt = from_init({.keys = std::move(keys), .values = std::move(values),
                                     .weights = std::move(weights), .lengths = std::move(lengths),
                                     .stride = stride, .stride_per_key_per_rank = std::move(sppkr),
                                     .inverse_indices = std::move(inverse_indices)},
                                    where);
  kjt.sync();
  return kjt;
}

KeyedJaggedTensor KeyedJaggedTensor::from_offsets_sync(
    std::vector<std::string> keys, Tensor values, Tensor offsets, Tensor weights,
    std::optional<int64_t> stride, std::optional<std::vector<std::vector<int64_t>>> sppkr,
    std::optional<InverseIndices> inverse_indices) {
  constexpr const char* where = "KeyedJaggedTensor::from_offsets_sync";
  FERRY_CHECK(offsets.defined(), InvalidArgument, where, ": offsets is undefined");
  KeyedJaggedTensor kjt = from_init({.keys = std::move(keys), .values = std::move(values),
                                     .weights = std::move(weights), .offsets = std::move(offsets),
                                     .stride = stride, .stride_per_key_per_rank = std::move(sppkr),
                                     .inverse_indices = std::move(inverse_indices)},
                                    where);
  kjt.sync();
  return kjt;
}

KeyedJaggedTensor KeyedJaggedTensor::empty(bool weighted, DType weights_dtype, DType lengths_dtype) {
  KjtInit init{.values = ferry::empty({0}, DType::Int64),
               .lengths = ferry::empty({0}, lengths_dtype), .stride = 0};
  if (weighted) init.weights = ferry::empty({0}, weights_dtype);
  return KeyedJaggedTensor(detail::build_kjt_state(std::move(init), "KeyedJaggedTensor::empty"));
}

// ---- accessors ----

const std::vector<std::string>& KeyedJaggedTensor::keys() const { return s_->keys; }
int64_t KeyedJaggedTensor::num_keys() const { return static_cast<int64_t>(s_->keys.size()); }
const Tensor& KeyedJaggedTensor::values() const { return s_->values; }
bool KeyedJaggedTensor::has_weights() const { return s_->weights.defined(); }
const Tensor& KeyedJaggedTensor::weights() const {
  FERRY_CHECK(s_->weights.defined(), InvalidArgument,
              "KeyedJaggedTensor::weights: this KeyedJaggedTensor has no weights");
  return s_->weights;
}
const Tensor& KeyedJaggedTensor::weights_or_none() const { return s_->weights; }
bool KeyedJaggedTensor::allows_duplicate_keys() const { return s_->allow_duplicate_keys; }
int64_t KeyedJaggedTensor::stride() const { return s_->stride; }
const std::vector<int64_t>& KeyedJaggedTensor::stride_per_key() const { return s_->stride_per_key; }
const std::vector<std::vector<int64_t>>& KeyedJaggedTensor::stride_per_key_per_rank() const {
  if (s_->variable) return s_->stride_per_key_per_rank;
  std::lock_guard<std::mutex> lock(s_->mu);
  if (!s_->uniform_stride_per_key_per_rank)
    s_->uniform_stride_per_key_per_rank.emplace(s_->keys.size(), std::vector<int64_t>{s_->stride});
  return *s_->uniform_stride_per_key_per_rank;
}
bool KeyedJaggedTensor::variable_stride_per_key() const { return s_->variable; }
const std::optional<InverseIndices>& KeyedJaggedTensor::inverse_indices() const {
  return s_->inverse_indices;
}
const std::vector<int64_t>& KeyedJaggedTensor::lengths_offset_per_key() const {
  return s_->lengths_offset_per_key;
}

Tensor KeyedJaggedTensor::lengths() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  if (!s_->lengths.defined()) s_->lengths = detail::lengths_from_offsets(s_->offsets);
  return s_->lengths;
}

Tensor KeyedJaggedTensor::offsets() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  if (!s_->offsets.defined())
    s_->offsets = detail::offsets_from_lengths(s_->lengths, "KeyedJaggedTensor::offsets");
  return s_->offsets;
}

const std::vector<int64_t>& KeyedJaggedTensor::offset_per_key() const {
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (s_->offset_per_key) return *s_->offset_per_key;
  }
  const std::vector<int64_t>& lpk = length_per_key();
  std::vector<int64_t> opk = detail::spare_list(lpk.size() + 1, 0);
  for (size_t k = 0; k < lpk.size(); ++k) opk[k + 1] = opk[k] + lpk[k];
  std::lock_guard<std::mutex> lock(s_->mu);
  if (!s_->offset_per_key) s_->offset_per_key = std::move(opk);
  else detail::give_back(opk);
  return *s_->offset_per_key;
}

const std::vector<int64_t>& KeyedJaggedTensor::length_per_key() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  if (!s_->length_per_key) {
    const auto& lo = s_->lengths_offset_per_key;
    std::vector<int64_t> lpk = detail::spare_list(s_->keys.size(), 0);
    if (s_->offsets.defined()) {  // two reads per key
      const Tensor& o = s_->offsets;
      for (size_t k = 0; k < lpk.size(); ++k)
        lpk[k] = static_cast<int64_t>(o.get_flat(lo[k + 1])) - static_cast<int64_t>(o.get_flat(lo[k]));
    } else {  // in place, at the vector width (the lengths were checked at construction)
      for (size_t k = 0; k < lpk.size(); ++k)
        lpk[k] = detail::sum_lengths(s_->lengths, lo[k], lo[k + 1]).sum;
    }
    s_->length_per_key = std::move(lpk);
  }
  return *s_->length_per_key;
}

std::map<std::string, int64_t> KeyedJaggedTensor::index_per_key() const {
  FERRY_CHECK(s_->first_duplicate < 0, InvalidArgument,
              "KeyedJaggedTensor::index_per_key: key \"", s_->keys[s_->first_duplicate],
              "\" repeats in ", detail::keys_str(s_->keys), "; access by key is ambiguous");
  std::map<std::string, int64_t> out;
  for (const auto& [key, position] : index_of(*s_)) out.emplace(std::string(key), position);
  return out;
}

bool KeyedJaggedTensor::keys_unique() const { return s_->first_duplicate < 0; }

int64_t KeyedJaggedTensor::key_index(const std::string& key) const {
  const int64_t position = first_position(index_of(*s_), key);
  FERRY_CHECK(position >= 0, InvalidArgument, "KeyedJaggedTensor: no key \"", key,
              "\" in keys ", detail::keys_str(s_->keys));
  FERRY_CHECK(s_->first_duplicate < 0 || std::count(s_->keys.begin(), s_->keys.end(), key) == 1,
              InvalidArgument,
              "KeyedJaggedTensor: key \"", key, "\" repeats in ", detail::keys_str(s_->keys),
              "; access by key is ambiguous");
  return position;
}

const KeyedJaggedTensor& KeyedJaggedTensor::sync() const {
  lengths();
  offsets();
  offset_per_key();
  return *this;
}

// ---- by key ----

JaggedTensor KeyedJaggedTensor::operator[](const std::string& key) const {
  const int64_t k = key_index(key);
  const std::vector<int64_t>& opk = offset_per_key();
  const auto& lo = s_->lengths_offset_per_key;
  const int64_t v0 = opk[k], nv = opk[k + 1] - opk[k];
  return JaggedTensor(s_->values.narrow(0, v0, nv), lengths().narrow(0, lo[k], lo[k + 1] - lo[k]),
                      Tensor(), s_->weights.defined() ? s_->weights.narrow(0, v0, nv) : Tensor());
}

std::map<std::string, JaggedTensor> KeyedJaggedTensor::to_dict() const {
  index_per_key();  // throws for repeated keys
  std::map<std::string, JaggedTensor> out;
  for (const std::string& key : s_->keys) out.emplace(key, (*this)[key]);
  return out;
}

// ---- split, permute, concat ----

std::vector<KeyedJaggedTensor> KeyedJaggedTensor::split(const std::vector<int64_t>& segments) const {
  constexpr const char* where = "KeyedJaggedTensor::split";
  int64_t total = 0;
  for (int64_t s : segments) {
    FERRY_CHECK(s >= 0, InvalidArgument, where, ": segments ", list_str(segments),
                " contain a negative size");
    total += s;
  }
  FERRY_CHECK(total == num_keys(), InvalidArgument, where, ": segments ", list_str(segments),
              " sum to ", total, " but there are ", num_keys(), " keys");
  const std::vector<int64_t>& opk = offset_per_key();
  const auto& lo = s_->lengths_offset_per_key;
  const Tensor all_lengths = lengths();
  std::vector<KeyedJaggedTensor> out;
  int64_t k0 = 0;
  for (int64_t seg : segments) {
    const int64_t k1 = k0 + seg;
    KjtInit init;
    init.keys.assign(s_->keys.begin() + k0, s_->keys.begin() + k1);
    init.values = s_->values.narrow(0, opk[k0], opk[k1] - opk[k0]);
    if (s_->weights.defined()) init.weights = s_->weights.narrow(0, opk[k0], opk[k1] - opk[k0]);
    init.lengths = all_lengths.narrow(0, lo[k0], lo[k1] - lo[k0]);
    init.stride = s_->stride;
    if (s_->variable)
      init.stride_per_key_per_rank.emplace(s_->stride_per_key_per_rank.begin() + k0,
                                           s_->stride_per_key_per_rank.begin() + k1);
    init.inverse_indices = s_->inverse_indices;
    init.allow_duplicate_keys = s_->allow_duplicate_keys;
    out.push_back(from_init(std::move(init), where));
    k0 = k1;
  }
  return out;
}

KeyedJaggedTensor KeyedJaggedTensor::permute(const std::vector<int64_t>& indices) const {
  constexpr const char* where = "KeyedJaggedTensor::permute";
  const int64_t K = num_keys();
  thread_local std::vector<bool> seen;  // scratch, refilled by every call
  seen.assign(static_cast<size_t>(K), false);
  bool repeats = false;
  for (size_t i = 0; i < indices.size(); ++i) {
    FERRY_CHECK(indices[i] >= 0 && indices[i] < K, InvalidArgument, where, ": index ", indices[i],
                " at position ", i, " is out of range for ", K, " keys");
    repeats = repeats || seen[indices[i]];
    seen[indices[i]] = true;
  }
  detail::JaggedParts parts = detail::permute_segments({lengths(), s_->values, s_->weights},
                                                       s_->stride_per_key, indices, where);
  KjtInit init;
  init.keys.reserve(indices.size());
  for (int64_t i : indices) init.keys.push_back(s_->keys[i]);
  init.values = parts.values;
  init.weights = parts.weights;
  init.lengths = parts.lengths;
  init.stride = s_->stride;
  if (s_->variable) {
    init.stride_per_key_per_rank.emplace();
    for (int64_t i : indices) init.stride_per_key_per_rank->push_back(s_->stride_per_key_per_rank[i]);
  }
  init.inverse_indices = s_->inverse_indices;
  init.allow_duplicate_keys = s_->allow_duplicate_keys || repeats;
  return from_init(std::move(init), where);
}

KeyedJaggedTensor KeyedJaggedTensor::concat(const std::vector<KeyedJaggedTensor>& kjts) {
  constexpr const char* where = "KeyedJaggedTensor::concat";
  if (kjts.empty()) return empty();
  const KeyedJaggedTensor& first = kjts[0];
  bool variable = false, allow_dup = false;
  std::optional<int64_t> stride;
  for (size_t i = 0; i < kjts.size(); ++i) {
    const KeyedJaggedTensor& k = kjts[i];
    FERRY_CHECK(k.has_weights() == first.has_weights(), InvalidArgument, where, ": KJT ", i,
                (k.has_weights() ? " is weighted" : " is unweighted"), " but KJT 0 is ",
                (first.has_weights() ? "weighted" : "unweighted"));
    FERRY_CHECK(!k.has_weights() || k.weights().dtype() == first.weights().dtype(),
                InvalidArgument, where, ": KJT ", i, " has ", dtype_name(k.weights().dtype()),
                " weights but KJT 0 has ", dtype_name(first.weights().dtype()));
    FERRY_CHECK(k.lengths().dtype() == first.lengths().dtype(), InvalidArgument, where, ": KJT ",
                i, " has ", dtype_name(k.lengths().dtype()), " lengths but KJT 0 has ",
                dtype_name(first.lengths().dtype()));
    variable = variable || k.variable_stride_per_key();
    allow_dup = allow_dup || k.allows_duplicate_keys();
  }
  if (!variable) {
    for (size_t i = 0; i < kjts.size(); ++i) {
      if (kjts[i].num_keys() == 0) continue;
      if (!stride) stride = kjts[i].stride();
      FERRY_CHECK(kjts[i].stride() == *stride, InvalidArgument, where, ": KJT ", i, " has stride ",
                  kjts[i].stride(), " but an earlier one has ", *stride,
                  " (use stride_per_key_per_rank for a variable batch per key)");
    }
    if (!stride) stride = first.stride();
  }
  KjtInit init;
  std::vector<Tensor> values, weights, lengths;
  if (variable) init.stride_per_key_per_rank.emplace();
  for (const KeyedJaggedTensor& k : kjts) {
    init.keys.insert(init.keys.end(), k.keys().begin(), k.keys().end());
    values.push_back(k.values());
    lengths.push_back(k.lengths());
    if (k.has_weights()) weights.push_back(k.weights());
    if (variable)
      init.stride_per_key_per_rank->insert(init.stride_per_key_per_rank->end(),
                                           k.stride_per_key_per_rank().begin(),
                                           k.stride_per_key_per_rank().end());
  }
  init.values = cat(values, 0);
  init.lengths = cat(lengths, 0);
  if (!weights.empty()) init.weights = cat(weights, 0);
  init.stride = stride;
  init.allow_duplicate_keys = allow_dup;
  return from_init(std::move(init), where);
}

std::ostream& operator<<(std::ostream& os, const KeyedJaggedTensor& kjt) {
  os << "KeyedJaggedTensor(keys=" << detail::keys_str(kjt.keys()) << ", stride=" << kjt.stride();
  if (kjt.variable_stride_per_key()) os << ", stride_per_key=" << list_str(kjt.stride_per_key());
  os << ", lengths=" << list_str(detail::index_vector(kjt.lengths()))
     << ", values=" << list_str(detail::index_vector(kjt.values()));
  if (kjt.has_weights()) os << ", weighted";
  return os << ')';
}

}  // namespace ferry::torchrec
