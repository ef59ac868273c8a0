#include <ferry/collectives/torchrec/modules/vbe_pooling.h>

#include <ferry/autograd/ops.h>
#include <ferry/collectives/torchrec/utils/format.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <map>

namespace ferry::torchrec::detail {

KeyedJaggedTensor pad_variable_stride(const KeyedJaggedTensor& kjt) {
  if (!kjt.variable_stride_per_key()) return kjt;
  const std::vector<int64_t>& spk = kjt.stride_per_key();
  const int64_t bmax = spk.empty() ? 0 : *std::max_element(spk.begin(), spk.end());
  const Tensor lengths = kjt.lengths();
  const std::vector<int64_t>& starts = kjt.lengths_offset_per_key();
  std::vector<int64_t> padded;
  padded.reserve(static_cast<size_t>(bmax) * spk.size());
  for (size_t k = 0; k < spk.size(); ++k) {
    for (int64_t b = 0; b < spk[k]; ++b)
      padded.push_back(static_cast<int64_t>(lengths.get_flat(starts[k] + b)));
    padded.insert(padded.end(), static_cast<size_t>(bmax - spk[k]), 0);
  }
  return KeyedJaggedTensor::from_lengths_sync(kjt.keys(), kjt.values(), from_vector(padded),
                                              kjt.weights_or_none(), bmax);
}

namespace {

// The inverse-index rows; `at()` starts an error's message (formatted only for an error).
template <class At>
std::vector<std::vector<int64_t>> inverse_rows_at(const KeyedJaggedTensor& kjt,
                                                  const std::vector<std::string>& features,
                                                  const At& at) {
  const auto& inv = kjt.inverse_indices();
  FERRY_CHECK(inv.has_value() && inv->indices.defined(), InvalidArgument, at(),
              ": a KJT with a variable stride per key (VBE) needs inverse_indices (torchrec "
              "expands the pooled rows with them); this one has none");
  FERRY_CHECK(inv->indices.dim() == 2 &&
                  inv->indices.size(0) == static_cast<int64_t>(inv->keys.size()),
              InvalidArgument, at(),
              ": inverse_indices must be [keys, B] with one row per key (", inv->keys.size(),
              " keys)");
  const int64_t B = inv->indices.size(1);
  std::map<std::string, int64_t> row;
  for (size_t i = 0; i < inv->keys.size(); ++i) row[inv->keys[i]] = static_cast<int64_t>(i);
  const auto index = kjt.index_per_key();
  std::vector<std::vector<int64_t>> out;
  for (const std::string& f : features) {
    auto r = row.find(f);
    FERRY_CHECK(r != row.end(), InvalidArgument, at(), ": feature \"", f,
                "\" has no row in the KJT's inverse_indices");
    const int64_t batch = kjt.stride_per_key()[static_cast<size_t>(index.at(f))];
    std::vector<int64_t> v(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      v[static_cast<size_t>(b)] = static_cast<int64_t>(inv->indices.get_flat(r->second * B + b));
      FERRY_CHECK(v[static_cast<size_t>(b)] >= 0 && v[static_cast<size_t>(b)] < batch,
                  InvalidArgument, at(), ": feature \"", f, "\": inverse index ",
                  v[static_cast<size_t>(b)], " of output sample ", b,
                  " is outside the feature's batch [0, ", batch, ")");
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace

std::vector<std::vector<int64_t>> inverse_rows(const KeyedJaggedTensor& kjt,
                                               const std::vector<std::string>& features,
                                               const char* op) {
  return inverse_rows_at(kjt, features, [op] { return op; });
}

std::vector<std::vector<int64_t>> inverse_rows(const KeyedJaggedTensor& kjt,
                                               const std::vector<std::string>& features,
                                               const char* op, const Group& group) {
  return inverse_rows_at(kjt, features, [&] { return where(op, group); });
}

Variable flat_select(const Variable& x, const std::vector<int64_t>& index) {
  const Variable column = reshape(x, {x.value().numel(), 1});
  return reshape(index_select(column, 0, from_vector(index)),
                 {static_cast<int64_t>(index.size())});
}

Variable gather_vbe_output(const Variable& flat, const std::vector<VbeBlock>& blocks,
                           const std::vector<int64_t>& dims,
                           const std::vector<std::vector<int64_t>>& inverse) {
  const int64_t B = inverse.empty() ? 0 : static_cast<int64_t>(inverse.front().size());
  std::vector<int64_t> first_col(dims.size() + 1, 0);
  for (size_t f = 0; f < dims.size(); ++f) first_col[f + 1] = first_col[f] + dims[f];
  const int64_t C = first_col.back();
  std::vector<int64_t> index(static_cast<size_t>(B * C), -1);
  for (const VbeBlock& k : blocks) {
    const auto& inv = inverse[static_cast<size_t>(k.feature)];
    const int64_t c0 = first_col[static_cast<size_t>(k.feature)] + k.col_offset;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t d = 0; d < k.width; ++d)
        index[static_cast<size_t>(b * C + c0 + d)] =
            k.start + inv[static_cast<size_t>(b)] * k.row_stride + d;
  }
  FERRY_CHECK(std::none_of(index.begin(), index.end(), [](int64_t i) { return i < 0; }),
              InvalidArgument, "gather_vbe_output: the blocks do not cover every column");
  return reshape(flat_select(flat, index), {B, C});
}

}  // namespace ferry::torchrec::detail
