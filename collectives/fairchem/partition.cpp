#include <ferry/collectives/fairchem/fairchem.h>

#include <ferry/collectives/fairchem/internal.h>
#include <ferry/runtime/error.h>

#include <string>

namespace ferry::fairchem {

int64_t normalize_partition_dim(const char* op, int64_t dim, const Shape& shape, int rank) {
  const auto ndim = static_cast<int64_t>(shape.size());
  if (dim < -ndim || dim >= ndim) {
    const std::string where = rank >= 0 ? detail::str(" on rank ", rank) : std::string();
    FERRY_THROW(InvalidArgument, op, where, ": dim ", dim, " is out of range for shape ",
                shape_str(shape),
                ndim == 0 ? std::string(" (a 0-d tensor has no dim to cut)")
                          : detail::str(" (expected [", -ndim, ", ", ndim - 1, "])"));
  }
  return dim < 0 ? dim + ndim : dim;
}

std::vector<int64_t> canonical_partition(int64_t n, int parts) {
  FERRY_CHECK(parts >= 1, InvalidArgument, "canonical_partition: parts must be >= 1, given ",
              parts);
  FERRY_CHECK(n >= 0, InvalidArgument, "canonical_partition: n must be >= 0, given ", n);
  const int64_t q = n / parts;
  const int64_t m = n % parts;
  std::vector<int64_t> sizes(static_cast<size_t>(parts));
  for (int k = 0; k < parts; ++k) sizes[static_cast<size_t>(k)] = q + (k < m ? 1 : 0);
  return sizes;
}

int64_t partition_start(int64_t n, int parts, int part) {
  FERRY_CHECK(part >= 0 && part < parts, InvalidArgument, "partition_start: part ", part,
              " is out of range for ", parts, " parts");
  const std::vector<int64_t> sizes = canonical_partition(n, parts);
  int64_t start = 0;
  for (int k = 0; k < part; ++k) start += sizes[static_cast<size_t>(k)];
  return start;
}

Tensor pad_tensor(const Tensor& t, int64_t dim, std::optional<int64_t> target) {
  if (!target) return pad_tensor_to_multiple(t, default_gp_world_size("pad_tensor"), dim);
  const int64_t target_size = *target;
  FERRY_CHECK(t.defined(), InvalidArgument, "pad_tensor: the tensor is undefined");
  dim = normalize_partition_dim("pad_tensor", dim, t.shape());
  const int64_t n = t.size(dim);
  FERRY_CHECK(target_size >= n, InvalidArgument, "pad_tensor: target size ", target_size,
              " along dim ", dim, " is smaller than the tensor's size ", n, " (shape ",
              shape_str(t.shape()), ")");
  if (target_size == n) return t;
  Shape pad_shape = t.shape();
  pad_shape[static_cast<size_t>(dim)] = target_size - n;
  return cat({t, zeros(pad_shape, t.dtype())}, dim);
}

Tensor pad_tensor_to_multiple(const Tensor& t, int parts, int64_t dim) {
  FERRY_CHECK(parts >= 1, InvalidArgument, "pad_tensor: parts must be >= 1, given ", parts);
  FERRY_CHECK(t.defined(), InvalidArgument, "pad_tensor: the tensor is undefined");
  const int64_t n = t.size(normalize_partition_dim("pad_tensor", dim, t.shape()));
  const int64_t rest = n % parts;
  return pad_tensor(t, dim, rest == 0 ? n : n + (parts - rest));
}

TrimmedTensor trim_tensor_to_multiple(const Tensor& t, int parts, std::vector<int64_t> sizes,
                                      int64_t dim) {
  FERRY_CHECK(parts >= 1, InvalidArgument, "trim_tensor: parts must be >= 1, given ", parts);
  FERRY_CHECK(t.defined(), InvalidArgument, "trim_tensor: the tensor is undefined");
  dim = normalize_partition_dim("trim_tensor", dim, t.shape());
  const int64_t n = t.size(dim);
  const int64_t extra = n % parts;
  if (extra == 0) return {t, std::move(sizes)};
  if (!sizes.empty()) {
    FERRY_CHECK(sizes.back() >= extra, InvalidArgument, "trim_tensor: the last size ",
                sizes.back(), " cannot give up the ", extra, " trimmed entries");
    sizes.back() -= extra;
  }
  Tensor kept = dim == 0 ? t.narrow(0, 0, n - extra) : t.narrow_copy(dim, 0, n - extra);
  return {kept, std::move(sizes)};
}

TrimmedTensor trim_tensor(const Tensor& t, std::vector<int64_t> sizes, int64_t dim) {
  return trim_tensor_to_multiple(t, default_gp_world_size("trim_tensor"), std::move(sizes), dim);
}

}  // namespace ferry::fairchem
