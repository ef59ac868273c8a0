#include <ferry/collectives/torchrec/sparse/keyed_tensor.h>

#include <ferry/collectives/torchrec/sparse/jagged_kernels.h>
#include <ferry/runtime/error.h>

#include <unordered_map>
#include <utility>

namespace ferry::torchrec {

using detail::keys_str;
using detail::list_str;

KeyedTensor::KeyedTensor(std::vector<std::string> keys, std::vector<int64_t> length_per_key,
                         Tensor values, int64_t key_dim)
    : keys_(std::move(keys)),
      length_per_key_(std::move(length_per_key)),
      values_(std::move(values)),
      key_dim_(key_dim) {
  constexpr const char* where = "KeyedTensor";
  FERRY_CHECK(values_.defined(), InvalidArgument, where, ": values is undefined");
  FERRY_CHECK(key_dim_ >= 0 && key_dim_ < values_.dim(), InvalidArgument, where, ": key_dim ",
              key_dim_, " is out of range for values of shape ", shape_str(values_.shape()));
  FERRY_CHECK(length_per_key_.size() == keys_.size(), InvalidArgument, where, ": ",
              length_per_key_.size(), " lengths ", list_str(length_per_key_), " for ",
              keys_.size(), " keys ", keys_str(keys_));
  std::unordered_map<std::string, size_t> seen;
  for (size_t k = 0; k < keys_.size(); ++k) {
    auto [it, fresh] = seen.emplace(keys_[k], k);
    FERRY_CHECK(fresh, InvalidArgument, where, ": key \"", keys_[k], "\" appears twice (positions ",
                it->second, " and ", k, ") in keys ", keys_str(keys_));
  }
  offset_per_key_.assign(keys_.size() + 1, 0);
  for (size_t k = 0; k < keys_.size(); ++k) {
    FERRY_CHECK(length_per_key_[k] >= 0, InvalidArgument, where, ": length of key \"", keys_[k],
                "\" is negative: length_per_key ", list_str(length_per_key_));
    offset_per_key_[k + 1] = offset_per_key_[k] + length_per_key_[k];
  }
  FERRY_CHECK(offset_per_key_.back() == values_.size(key_dim_), InvalidArgument, where,
              ": length_per_key ", list_str(length_per_key_), " sums to ", offset_per_key_.back(),
              " but values ", shape_str(values_.shape()), " has ", values_.size(key_dim_),
              " along key_dim ", key_dim_);
}

KeyedTensor KeyedTensor::from_tensor_list(std::vector<std::string> keys,
                                          const std::vector<Tensor>& tensors, int64_t key_dim) {
  constexpr const char* where = "KeyedTensor::from_tensor_list";
  FERRY_CHECK(keys.size() == tensors.size(), InvalidArgument, where, ": ", keys.size(),
              " keys for ", tensors.size(), " tensors");
  FERRY_CHECK(!tensors.empty(), InvalidArgument, where, ": needs at least one tensor");
  std::vector<int64_t> lengths;
  for (size_t i = 0; i < tensors.size(); ++i) {
    FERRY_CHECK(tensors[i].defined() && key_dim >= 0 && key_dim < tensors[i].dim(),
                InvalidArgument, where, ": tensor ", i, " has no dim ", key_dim);
    lengths.push_back(tensors[i].size(key_dim));
  }
  return KeyedTensor(std::move(keys), std::move(lengths), cat(tensors, key_dim), key_dim);
}

int64_t KeyedTensor::key_index(const std::string& key) const {
  for (size_t k = 0; k < keys_.size(); ++k)
    if (keys_[k] == key) return static_cast<int64_t>(k);
  FERRY_THROW(InvalidArgument, "KeyedTensor: no key \"", key, "\" in keys ", keys_str(keys_));
}

Tensor KeyedTensor::operator[](const std::string& key) const {
  const int64_t k = key_index(key);
  const int64_t start = offset_per_key_[k], len = length_per_key_[k];
  bool view = true;
  for (int64_t d = 0; d < key_dim_; ++d) view = view && values_.size(d) == 1;
  if (view) return values_.narrow(key_dim_, start, len);
  Shape shape = values_.shape();
  shape[key_dim_] = len;
  Tensor out = empty(shape, values_.dtype());
  detail::copy_slab(values_, key_dim_, start, len, out, 0);
  return out;
}

std::map<std::string, Tensor> KeyedTensor::to_dict() const {
  std::map<std::string, Tensor> out;
  for (const std::string& key : keys_) out.emplace(key, (*this)[key]);
  return out;
}

std::vector<Tensor> KeyedTensor::regroup(const std::vector<KeyedTensor>& kts,
                                         const std::vector<std::vector<std::string>>& groups) {
  constexpr const char* where = "KeyedTensor::regroup";
  FERRY_CHECK(!kts.empty(), InvalidArgument, where, ": needs at least one KeyedTensor");
  const KeyedTensor& first = kts[0];
  std::unordered_map<std::string, std::pair<size_t, int64_t>> owner;  // key -> (kt, index)
  for (size_t i = 0; i < kts.size(); ++i) {
    const KeyedTensor& kt = kts[i];
    FERRY_CHECK(kt.key_dim() == 1, InvalidArgument, where, ": KeyedTensor ", i, " has key_dim ",
                kt.key_dim(), "; regroup needs key_dim 1");
    FERRY_CHECK(kt.values().dtype() == first.values().dtype(), InvalidArgument, where,
                ": KeyedTensor ", i, " is ", dtype_name(kt.values().dtype()), " but KeyedTensor 0 is ",
                dtype_name(first.values().dtype()));
    Shape a = kt.values().shape(), b = first.values().shape();
    a[1] = b[1] = 0;
    FERRY_CHECK(a == b, InvalidArgument, where, ": KeyedTensor ", i, " has values ",
                shape_str(kt.values().shape()), " but KeyedTensor 0 has ",
                shape_str(first.values().shape()), " (only dim 1 may differ)");
    for (size_t k = 0; k < kt.keys().size(); ++k) {
      auto [it, fresh] = owner.emplace(kt.keys()[k], std::make_pair(i, static_cast<int64_t>(k)));
      FERRY_CHECK(fresh, InvalidArgument, where, ": key \"", kt.keys()[k],
                  "\" is in KeyedTensor ", it->second.first, " and in KeyedTensor ", i);
    }
  }
  std::vector<Tensor> out;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<std::pair<size_t, int64_t>> members;
    int64_t width = 0;
    for (const std::string& key : groups[g]) {
      auto it = owner.find(key);
      FERRY_CHECK(it != owner.end(), InvalidArgument, where, ": key \"", key, "\" of group ", g,
                  " is in none of the KeyedTensors");
      members.push_back(it->second);
      width += kts[it->second.first].length_per_key()[it->second.second];
    }
    Shape shape = first.values().shape();
    shape[1] = width;
    Tensor dst = empty(shape, first.values().dtype());
    // Matrices: one pass over the rows per source KeyedTensor, whose keys of this group are
    // copied together; values of more dims go key by key.
    std::vector<std::vector<detail::ColumnBlock>> blocks(kts.size());
    int64_t col = 0;
    for (auto [i, k] : members) {
      const KeyedTensor& kt = kts[i];
      const int64_t start = kt.offset_per_key()[k], length = kt.length_per_key()[k];
      if (dst.dim() == 2) {
        blocks[i].push_back({.src_col = start, .dst_col = col, .width = length});
      } else {
        detail::copy_slab(kt.values(), 1, start, length, dst, col);
      }
      col += length;
    }
    for (size_t i = 0; i < kts.size(); ++i) {
      if (!blocks[i].empty()) detail::copy_column_blocks(kts[i].values(), dst, blocks[i]);
    }
    out.push_back(dst);
  }
  return out;
}

std::map<std::string, Tensor> KeyedTensor::regroup_as_dict(
    const std::vector<KeyedTensor>& kts, const std::vector<std::vector<std::string>>& groups,
    const std::vector<std::string>& names) {
  FERRY_CHECK(names.size() == groups.size(), InvalidArgument, "KeyedTensor::regroup_as_dict: ",
              names.size(), " names for ", groups.size(), " groups");
  std::vector<Tensor> tensors = regroup(kts, groups);
  std::map<std::string, Tensor> out;
  for (size_t g = 0; g < names.size(); ++g) {
    auto [it, fresh] = out.emplace(names[g], tensors[g]);
    FERRY_CHECK(fresh, InvalidArgument, "KeyedTensor::regroup_as_dict: name \"", names[g],
                "\" repeats");
  }
  return out;
}

}  // namespace ferry::torchrec
