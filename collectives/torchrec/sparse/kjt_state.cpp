#include <ferry/collectives/torchrec/sparse/kjt_state.h>

#include <ferry/collectives/torchrec/sparse/jagged_kernels.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace ferry::torchrec::detail {

namespace {

void validate_offsets(const std::vector<int64_t>& o, int64_t num_values, const char* where) {
  FERRY_CHECK(o[0] == 0, InvalidArgument, where, ": offsets must start with 0, got ", list_str(o));
  for (size_t i = 1; i < o.size(); ++i)
    FERRY_CHECK(o[i] >= o[i - 1], InvalidArgument, where, ": offsets decrease at ", i, " (",
                o[i - 1], " -> ", o[i], ") in ", list_str(o));
  FERRY_CHECK(o.back() == num_values, InvalidArgument, where, ": offsets end at ", o.back(),
              " but values has ", num_values, " elements");
}

// The first key equal to an earlier one: {the earlier position, its position}, or {-1, -1}. A
// quadratic scan for the usual handful of keys (no allocation), a hash map beyond that.
std::pair<int64_t, int64_t> first_repeated_key(const std::vector<std::string>& keys) {
  const int64_t K = static_cast<int64_t>(keys.size());
  if (K <= 32) {
    for (int64_t k = 1; k < K; ++k)
      for (int64_t i = 0; i < k; ++i)
        if (keys[i] == keys[k]) return {i, k};
    return {-1, -1};
  }
  std::unordered_map<std::string_view, int64_t> seen;
  for (int64_t k = 0; k < K; ++k) {
    auto [it, fresh] = seen.emplace(keys[k], k);
    if (!fresh) return {it->second, k};
  }
  return {-1, -1};
}

// The keys, kept with the position of the first repeat (which access by key refuses).
void take_keys(KjtState& s, KjtInit& in, const char* where) {
  s.allow_duplicate_keys = in.allow_duplicate_keys;
  const auto [first, repeat] = first_repeated_key(in.keys);
  if (repeat >= 0) {
    s.first_duplicate = repeat;
    FERRY_CHECK(in.allow_duplicate_keys, InvalidArgument, where, ": key \"", in.keys[repeat],
                "\" appears twice (positions ", first, " and ", repeat, ") in keys ",
                keys_str(in.keys), "; keys must be unique");
  }
  s.keys = std::move(in.keys);
}

// The ids and their optional weights; returns the number of values.
int64_t take_values_and_weights(KjtState& s, KjtInit& in, const char* where) {
  FERRY_CHECK(in.values.defined(), InvalidArgument, where, ": values is undefined");
  FERRY_CHECK(in.values.dtype() == DType::Int64, InvalidArgument, where,
              ": values (ids) must be int64, got ", dtype_name(in.values.dtype()));
  FERRY_CHECK(in.values.dim() == 1, InvalidArgument, where, ": values must be 1-D, got shape ",
              shape_str(in.values.shape()));
  const int64_t n = in.values.numel();
  if (in.weights.defined()) {
    FERRY_CHECK(in.weights.dtype() == DType::Float32 || in.weights.dtype() == DType::Float64,
                InvalidArgument, where, ": weights must be float32 or float64, got ",
                dtype_name(in.weights.dtype()));
    FERRY_CHECK(in.weights.dim() == 1, InvalidArgument, where, ": weights must be 1-D, got shape ",
                shape_str(in.weights.shape()));
    FERRY_CHECK(in.weights.numel() == n, InvalidArgument, where, ": weights has ",
                in.weights.numel(), " elements but values has ", n);
  }
  s.values = std::move(in.values);
  s.weights = std::move(in.weights);
  return n;
}

// How many length entries the lengths and / or offsets describe, from their dtype and shape only
// (their contents are checked once the strides say which key each entry belongs to).
int64_t count_length_entries(const KjtInit& in, const char* where) {
  FERRY_CHECK(in.lengths.defined() || in.offsets.defined(), InvalidArgument, where,
              ": give lengths or offsets (both are undefined)");
  int64_t num_lengths = -1;
  if (in.lengths.defined()) {
    check_index_tensor(in.lengths, where, "lengths");
    num_lengths = in.lengths.numel();
  }
  if (in.offsets.defined()) {
    check_index_tensor(in.offsets, where, "offsets");
    FERRY_CHECK(in.offsets.numel() >= 1, InvalidArgument, where,
                ": offsets needs at least one entry (the leading 0)");
    FERRY_CHECK(num_lengths < 0 || in.offsets.numel() == num_lengths + 1, InvalidArgument, where,
                ": ", num_lengths, " lengths need ", num_lengths + 1, " offsets, got ",
                in.offsets.numel());
    num_lengths = in.offsets.numel() - 1;
  }
  return num_lengths;
}

// A variable batch per key: each key's stride is the sum of its per-rank strides.
void take_variable_strides(KjtState& s, KjtInit& in, const char* where) {
  auto& sppkr = *in.stride_per_key_per_rank;
  const int64_t K = static_cast<int64_t>(s.keys.size());
  FERRY_CHECK(static_cast<int64_t>(sppkr.size()) == K, InvalidArgument, where,
              ": stride_per_key_per_rank has ", sppkr.size(), " entries for ", K, " keys");
  s.variable = true;
  int64_t max_stride = 0;
  for (int64_t k = 0; k < K; ++k) {
    FERRY_CHECK(!sppkr[k].empty(), InvalidArgument, where, ": stride_per_key_per_rank of key \"",
                s.keys[k], "\" is empty (one stride per rank expected)");
    int64_t sum = 0;
    for (int64_t v : sppkr[k]) {
      FERRY_CHECK(v >= 0, InvalidArgument, where, ": stride_per_key_per_rank of key \"",
                  s.keys[k], "\" has a negative stride: ", list_str(sppkr[k]));
      sum += v;
    }
    s.stride_per_key.push_back(sum);
    max_stride = std::max(max_stride, sum);
  }
  s.stride = in.stride.value_or(max_stride);
  s.stride_per_key_per_rank = std::move(sppkr);
}

// One batch for every key: given, or the length entries shared out over the keys.
void take_uniform_stride(KjtState& s, const KjtInit& in, int64_t num_lengths,
                         const char* where) {
  const int64_t K = static_cast<int64_t>(s.keys.size());
  if (in.stride) {
    s.stride = *in.stride;
  } else if (K > 0) {
    FERRY_CHECK(num_lengths % K == 0, InvalidArgument, where, ": ", num_lengths,
                " lengths are not a multiple of the ", K, " keys ", keys_str(s.keys),
                " (give stride_per_key_per_rank for a variable batch per key)");
    s.stride = num_lengths / K;
  }
  FERRY_CHECK(s.stride >= 0, InvalidArgument, where, ": stride ", s.stride, " is negative");
  s.stride_per_key = spare_list(static_cast<size_t>(K), s.stride);
}

// The strides per key, where each key's length entries start, and that the entries given are
// exactly as many as the strides need.
void take_strides(KjtState& s, KjtInit& in, int64_t num_lengths, const char* where) {
  if (in.stride_per_key_per_rank) take_variable_strides(s, in, where);
  else take_uniform_stride(s, in, num_lengths, where);
  const int64_t K = static_cast<int64_t>(s.keys.size());
  s.lengths_offset_per_key = spare_list(static_cast<size_t>(K) + 1, 0);
  for (int64_t k = 0; k < K; ++k)
    s.lengths_offset_per_key[k + 1] = s.lengths_offset_per_key[k] + s.stride_per_key[k];
  const int64_t expected = s.lengths_offset_per_key.back();
  FERRY_CHECK(num_lengths == expected, InvalidArgument, where, ": ", num_lengths,
              " lengths given but ", K, " keys with ",
              s.variable ? std::string("strides per key ") + list_str(s.stride_per_key)
                         : "stride " + std::to_string(s.stride),
              " need ", expected);
}

// The caller's per-key value counts, checked against the lengths by the caller
// (kjt_with_checked_lengths): only their shape and total are checked here.
void take_checked_length_per_key(KjtState& s, const KjtInit& in, int64_t n,
                                 std::vector<int64_t>& lpk, const char* where) {
  const int64_t K = static_cast<int64_t>(s.keys.size());
  const int64_t sum = sum_of(lpk);
  FERRY_CHECK(in.lengths.defined() && !in.offsets.defined() &&
                  static_cast<int64_t>(lpk.size()) == K && sum == n,
              InvalidArgument, where, ": checked per-key counts ", list_str(lpk), " (sum ", sum,
              ") do not fit ", K, " keys, lengths without offsets and ", n, " values");
  s.length_per_key = std::move(lpk);
}

// No negative length, the lengths add up to the values, and agree with the offsets if given too.
void check_lengths(const KjtState& s, const KjtInit& in, int64_t num_lengths, int64_t n,
                   const char* where) {
  // One pass over the lengths as stored: every KJT an exchange builds pays for this check, so it
  // reads them in place (the int64 copy is made only for an error's message or the offsets).
  const LengthsSum total = sum_lengths(in.lengths, 0, num_lengths);
  if (total.negative) {
    // name the key and sample of the bad entry
    const std::vector<int64_t> l = index_vector(in.lengths);
    const int64_t i = std::find_if(l.begin(), l.end(), [](int64_t x) { return x < 0; }) - l.begin();
    const auto k = std::upper_bound(s.lengths_offset_per_key.begin(),
                                    s.lengths_offset_per_key.end(), i) -
                   s.lengths_offset_per_key.begin() - 1;
    FERRY_THROW(InvalidArgument, where, ": lengths[", i, "] = ", l[i], " is negative (key \"",
                s.keys[k], "\", sample ", i - s.lengths_offset_per_key[k], ")");
  }
  FERRY_CHECK(total.sum == n, InvalidArgument, where, ": lengths ",
              list_str(index_vector(in.lengths)), " sum to ", total.sum,
              " but values has ", n, " elements");
  if (in.offsets.defined()) {
    const std::vector<int64_t> l = index_vector(in.lengths);
    const std::vector<int64_t> o = index_vector(in.offsets);
    validate_offsets(o, n, where);
    for (size_t i = 0; i < l.size(); ++i)
      FERRY_CHECK(o[i + 1] - o[i] == l[i], InvalidArgument, where, ": lengths[", i, "] = ", l[i],
                  " disagrees with offsets ", o[i], " -> ", o[i + 1]);
  }
}

void take_inverse_indices(KjtState& s, KjtInit& in, const char* where) {
  if (!in.inverse_indices) return;
  const Tensor& t = in.inverse_indices->indices;
  FERRY_CHECK(t.defined() && (t.dtype() == DType::Int32 || t.dtype() == DType::Int64) &&
                  t.dim() == 2,
              InvalidArgument, where, ": inverse_indices must be a 2-D int32/int64 tensor, got ",
              t.defined() ? shape_str(t.shape()) + " " + dtype_name(t.dtype()) : "undefined");
  FERRY_CHECK(t.size(0) == static_cast<int64_t>(in.inverse_indices->keys.size()),
              InvalidArgument, where, ": inverse_indices has ", t.size(0), " rows for ",
              in.inverse_indices->keys.size(), " keys");
  s.inverse_indices = std::move(in.inverse_indices);
}

}  // namespace

std::shared_ptr<KjtState> build_kjt_state(KjtInit in, const char* where,
                                          std::vector<int64_t>* checked_length_per_key) {
  auto s = ferry::detail::make_pooled<KjtState>();
  take_keys(*s, in, where);
  const int64_t n = take_values_and_weights(*s, in, where);
  const int64_t num_lengths = count_length_entries(in, where);
  take_strides(*s, in, num_lengths, where);
  if (checked_length_per_key != nullptr)
    take_checked_length_per_key(*s, in, n, *checked_length_per_key, where);
  else if (in.lengths.defined())
    check_lengths(*s, in, num_lengths, n, where);
  else
    validate_offsets(index_vector(in.offsets), n, where);
  s->lengths = std::move(in.lengths);
  s->offsets = std::move(in.offsets);
  take_inverse_indices(*s, in, where);
  return s;
}

}  // namespace ferry::torchrec::detail
