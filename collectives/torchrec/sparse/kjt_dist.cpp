#include <ferry/collectives/torchrec/sparse/kjt_dist.h>

#include <ferry/collectives/torchrec/sparse/jagged_kernels.h>
#include <ferry/runtime/error.h>

namespace ferry::torchrec {

using detail::list_str;

namespace detail {

void kjt_dist_labels_into(const KeyedJaggedTensor& kjt, std::vector<std::string>& labels) {
  labels.resize(2);
  labels[0] = "lengths";
  labels[1] = "values";
  if (kjt.variable_stride_per_key()) labels.emplace_back("strides");
  if (kjt.has_weights()) labels.emplace_back("weights");
}

void kjt_dist_splits_into(const KeyedJaggedTensor& kjt, const std::vector<int64_t>& key_splits,
                          std::vector<std::vector<int64_t>>& splits) {
  constexpr const char* where = "kjt_dist_splits";
  int64_t total = 0;
  for (int64_t s : key_splits) {
    FERRY_CHECK(s >= 0, InvalidArgument, where, ": key splits ", list_str(key_splits),
                " contain a negative count");
    total += s;
  }
  FERRY_CHECK(total == kjt.num_keys(), InvalidArgument, where, ": key splits ",
              list_str(key_splits), " sum to ", total, " but the KJT has ", kjt.num_keys(),
              " keys ", detail::keys_str(kjt.keys()));
  const std::vector<int64_t>& lpk = kjt.length_per_key();
  const std::vector<int64_t>& spk = kjt.stride_per_key();
  // lengths, values, and the strides and weights when present
  const size_t labels = 2 + (kjt.variable_stride_per_key() ? 1 : 0) + (kjt.has_weights() ? 1 : 0);
  splits.resize(labels);
  std::vector<int64_t>& lengths = splits[0];
  std::vector<int64_t>& values = splits[1];
  lengths.clear();
  values.clear();
  int64_t k = 0;
  for (int64_t s : key_splits) {
    int64_t nl = 0, nv = 0;
    for (int64_t e = k + s; k < e; ++k) {
      nl += spk[k];
      nv += lpk[k];
    }
    lengths.push_back(nl);
    values.push_back(nv);
  }
  size_t next = 2;
  if (kjt.variable_stride_per_key()) splits[next++] = key_splits;
  if (kjt.has_weights()) splits[next] = values;
}

void kjt_dist_tensors_into(const KeyedJaggedTensor& kjt, std::vector<Tensor>& tensors) {
  tensors.clear();
  tensors.push_back(kjt.lengths());
  tensors.push_back(kjt.values());
  if (kjt.variable_stride_per_key())
    tensors.push_back(index_tensor(kjt.stride_per_key(), DType::Int64, "kjt_dist_tensors"));
  if (kjt.has_weights()) tensors.push_back(kjt.weights());
}

}  // namespace detail

std::vector<std::string> kjt_dist_labels(const KeyedJaggedTensor& kjt) {
  std::vector<std::string> labels;
  detail::kjt_dist_labels_into(kjt, labels);
  return labels;
}

std::vector<std::vector<int64_t>> kjt_dist_splits(const KeyedJaggedTensor& kjt,
                                                  const std::vector<int64_t>& key_splits) {
  std::vector<std::vector<int64_t>> splits;
  detail::kjt_dist_splits_into(kjt, key_splits, splits);
  return splits;
}

std::vector<Tensor> kjt_dist_tensors(const KeyedJaggedTensor& kjt) {
  std::vector<Tensor> tensors;
  detail::kjt_dist_tensors_into(kjt, tensors);
  return tensors;
}

std::optional<std::vector<int64_t>> get_recat(int64_t local_split, int64_t num_splits,
                                              int64_t stagger) {
  constexpr const char* where = "get_recat";
  FERRY_CHECK(local_split >= 0, InvalidArgument, where, ": local_split ", local_split, " is negative");
  FERRY_CHECK(num_splits >= 1, InvalidArgument, where, ": num_splits ", num_splits, " must be >= 1");
  FERRY_CHECK(stagger >= 1 && num_splits % stagger == 0, InvalidArgument, where, ": stagger ",
              stagger, " must be >= 1 and divide num_splits ", num_splits);
  if (local_split == 0) return std::nullopt;
  const int64_t per = num_splits / stagger;
  std::vector<int64_t> recat;
  recat.reserve(static_cast<size_t>(local_split * num_splits));
  for (int64_t t = 0; t < local_split; ++t)
    for (int64_t x = 0; x < per; ++x)
      for (int64_t y = 0; y < stagger; ++y) recat.push_back(t + (x + per * y) * local_split);
  return recat;
}

KeyedJaggedTensor kjt_dist_init(std::vector<std::string> keys, const std::vector<Tensor>& tensors,
                                bool variable_stride_per_key, int64_t num_workers,
                                const std::optional<std::vector<int64_t>>& recat,
                                const std::vector<int64_t>& stride_per_rank) {
  constexpr const char* where = "kjt_dist_init";
  const int64_t K = static_cast<int64_t>(keys.size());
  const int64_t W = num_workers;
  FERRY_CHECK(W >= 1, InvalidArgument, where, ": num_workers ", W, " must be >= 1");
  const size_t base = variable_stride_per_key ? 3 : 2;
  FERRY_CHECK(tensors.size() == base || tensors.size() == base + 1, InvalidArgument, where,
              ": expected ", base, " tensors (lengths, values", variable_stride_per_key ? ", strides" : "",
              ") and optionally weights, got ", tensors.size());
  const Tensor& lengths = tensors[0];
  const Tensor& values = tensors[1];
  const Tensor weights = tensors.size() == base + 1 ? tensors[base] : Tensor();
  detail::check_index_tensor(lengths, where, "lengths");
  FERRY_CHECK(values.defined() && values.dim() == 1, InvalidArgument, where,
              ": values must be a 1-D tensor");
  FERRY_CHECK(!weights.defined() || (weights.dim() == 1 && weights.numel() == values.numel()),
              InvalidArgument, where, ": weights must be 1-D with ", values.numel(), " elements");

  // segment (s, t) -> its number of length entries, s*K + t
  std::vector<int64_t> seg(static_cast<size_t>(W * K));
  std::vector<int64_t> strides;
  if (variable_stride_per_key) {
    detail::check_index_tensor(tensors[2], where, "strides");
    strides = detail::index_vector(tensors[2]);
    FERRY_CHECK(static_cast<int64_t>(strides.size()) == W * K, InvalidArgument, where,
                ": strides has ", strides.size(), " entries, expected ", W, " workers x ", K,
                " keys = ", W * K);
    seg = strides;
  } else {
    FERRY_CHECK(static_cast<int64_t>(stride_per_rank.size()) == W, InvalidArgument, where,
                ": stride_per_rank ", list_str(stride_per_rank), " has ", stride_per_rank.size(),
                " entries for ", W, " workers");
    for (int64_t s = 0; s < W; ++s)
      for (int64_t t = 0; t < K; ++t) seg[s * K + t] = stride_per_rank[s];
  }

  std::vector<int64_t> order;
  if (recat) {
    FERRY_CHECK(static_cast<int64_t>(recat->size()) == W * K, InvalidArgument, where, ": recat ",
                list_str(*recat), " has ", recat->size(), " entries, expected ", W * K);
    std::vector<bool> seen(recat->size(), false);
    for (int64_t r : *recat) {
      FERRY_CHECK(r >= 0 && r < W * K && !seen[r], InvalidArgument, where, ": recat ",
                  list_str(*recat), " is not a permutation of 0..", W * K - 1);
      seen[r] = true;
    }
    order = *recat;
    for (int64_t q = 0; q < W * K; ++q)
      FERRY_CHECK(order[q] % K == q / W, InvalidArgument, where, ": recat ", list_str(*recat),
                  " does not put the ", W, " segments of local key ", q / W, " at positions ",
                  (q / W) * W, "..", (q / W) * W + W - 1);
  } else {
    FERRY_CHECK(K == 0 || W == 1, InvalidArgument, where, ": a recat is needed to reorder ", K,
                " keys received from ", W, " workers");
    for (int64_t i = 0; i < W * K; ++i) order.push_back(i);
  }

  detail::JaggedParts parts = detail::permute_segments({lengths, values, weights}, seg, order, where);
  KjtInit init{.keys = std::move(keys), .values = parts.values, .weights = parts.weights,
               .lengths = parts.lengths};
  if (variable_stride_per_key) {
    init.stride_per_key_per_rank.emplace(static_cast<size_t>(K));
    for (int64_t q = 0; q < W * K; ++q) (*init.stride_per_key_per_rank)[q / W].push_back(strides[order[q]]);
  } else {
    int64_t stride = 0;
    for (int64_t s : stride_per_rank) stride += s;
    init.stride = stride;
  }
  return KeyedJaggedTensor::from_init(std::move(init), where);
}

}  // namespace ferry::torchrec
