// reshape, cat, split / chunk and narrow: ops that move elements without arithmetic.
#include <ferry/autograd/ops.h>
#include <ferry/autograd/ops_detail.h>
#include <ferry/autograd/tensor_math_detail.h>

#include <numeric>

namespace ferry {

namespace {

using Grads = std::vector<Tensor>;
using Needs = std::vector<bool>;

// Elements [start, start + length) along dim: a view when that is contiguous (always along
// dim 0), a copy otherwise.
Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  bool contiguous = true;
  for (int64_t d = 0; d < dim; ++d) contiguous = contiguous && t.size(d) == 1;
  if (contiguous || length == t.size(dim) || t.numel() == 0) {
    return t.narrow(dim, start, length);
  }
  return t.narrow_copy(dim, start, length);
}

}  // namespace

Variable reshape(const Variable& x, Shape shape) {
  const Tensor& v = detail::value_of("reshape", x, "x");
  int64_t known = 1;
  int64_t inferred = 0;
  for (int64_t s : shape) {
    FERRY_CHECK(s >= -1, InvalidArgument, "reshape: sizes must be >= 0 or -1 but the target "
                "shape is ", shape_str(shape));
    if (s == -1) {
      ++inferred;
    } else {
      known *= s;
    }
  }
  FERRY_CHECK(inferred <= 1, InvalidArgument, "reshape: at most one size may be -1 but the "
              "target shape is ", shape_str(shape));
  const bool fits = inferred == 1 ? known != 0 && v.numel() % known == 0 : known == v.numel();
  FERRY_CHECK(fits, InvalidArgument, "reshape: a tensor of shape ", shape_str(v.shape()), " (",
              v.numel(), " elements) cannot be viewed as shape ", shape_str(shape));
  Tensor y = v.reshape(std::move(shape));
  if (!detail::should_record({&x})) return Variable(std::move(y));
  return detail::record("reshape", {&x}, std::move(y),
                        [from = x.shape()](const Grads& g, const Needs&) {
                          Grads out = detail::tensor_list(1);
                          out[0] = g[0].reshape(from);
                          return out;
                        });
}

Variable cat(const std::vector<Variable>& xs, int64_t dim) {
  FERRY_CHECK(!xs.empty(), InvalidArgument, "cat: needs at least one variable but got none");
  std::vector<Tensor> values;
  std::vector<const Variable*> inputs;
  for (size_t i = 0; i < xs.size(); ++i) {
    values.push_back(detail::value_of("cat", xs[i], detail::str("input ", i).c_str()));
    inputs.push_back(&xs[i]);
    FERRY_CHECK(values[i].dtype() == values[0].dtype(), InvalidArgument, "cat: input ", i,
                " has dtype ", dtype_name(values[i].dtype()), " but input 0 has ",
                dtype_name(values[0].dtype()));
  }
  FERRY_CHECK(values[0].dim() >= 1, InvalidArgument, "cat: 0-d variables cannot be "
              "concatenated (input 0 has shape [])");
  dim = detail::normalize_dim("cat", dim, values[0].shape());
  Tensor y = ferry::cat(values, dim);  // checks the other dims, naming both shapes
  if (!detail::should_record(inputs)) return Variable(std::move(y));
  std::vector<int64_t> sizes;
  for (const Tensor& v : values) sizes.push_back(v.size(dim));
  return detail::record("cat", inputs, std::move(y),
                        [sizes, dim](const Grads& g, const Needs& needs) {
                          Grads out(sizes.size());
                          int64_t start = 0;
                          for (size_t i = 0; i < sizes.size(); ++i) {
                            if (needs[i]) out[i] = slice(g[0], dim, start, sizes[i]);
                            start += sizes[i];
                          }
                          return out;
                        });
}

std::vector<Variable> split(const Variable& x, const std::vector<int64_t>& sizes, int64_t dim) {
  const Tensor& v = detail::value_of("split", x, "x");
  dim = detail::normalize_dim("split", dim, v.shape());
  const int64_t extent = v.size(dim);
  for (int64_t s : sizes) {
    FERRY_CHECK(s >= 0, InvalidArgument, "split: sizes must be non-negative but are ",
                shape_str(sizes));
  }
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  FERRY_CHECK(total == extent, InvalidArgument, "split: sizes ", shape_str(sizes), " sum to ",
              total, " but dim ", dim, " of shape ", shape_str(v.shape()), " has size ",
              extent);
  std::vector<Tensor> pieces;
  int64_t start = 0;
  for (int64_t s : sizes) {
    pieces.push_back(slice(v, dim, start, s));
    start += s;
  }
  if (!detail::should_record({&x})) {
    std::vector<Variable> out;
    for (Tensor& p : pieces) out.emplace_back(std::move(p));
    return out;
  }
  // One node for all pieces: the engine hands it zeros for the pieces nobody used.
  return detail::record("split", {&x}, std::move(pieces),
                        [dim](const Grads& g, const Needs&) { return Grads{cat(g, dim)}; });
}

std::vector<Variable> split(const Variable& x, int64_t split_size, int64_t dim) {
  const Tensor& v = detail::value_of("split", x, "x");
  dim = detail::normalize_dim("split", dim, v.shape());
  FERRY_CHECK(split_size > 0, InvalidArgument, "split: split_size must be positive but is ",
              split_size);
  const int64_t extent = v.size(dim);
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < extent; start += split_size) {
    sizes.push_back(std::min(split_size, extent - start));
  }
  if (sizes.empty()) sizes.push_back(0);  // like torch: an empty dim gives one empty piece
  return split(x, sizes, dim);
}

std::vector<Variable> chunk(const Variable& x, int64_t chunks, int64_t dim) {
  const Tensor& v = detail::value_of("chunk", x, "x");
  dim = detail::normalize_dim("chunk", dim, v.shape());
  FERRY_CHECK(chunks > 0, InvalidArgument, "chunk: chunks must be positive but is ", chunks);
  const int64_t extent = v.size(dim);
  // No piece size is implied by an empty dim, so torch keeps `chunks` empty pieces.
  if (extent == 0) return split(x, std::vector<int64_t>(static_cast<size_t>(chunks), 0), dim);
  return split(x, (extent + chunks - 1) / chunks, dim);
}

Variable narrow(const Variable& x, int64_t dim, int64_t start, int64_t length) {
  const Tensor& v = detail::value_of("narrow", x, "x");
  dim = detail::normalize_dim("narrow", dim, v.shape());
  const int64_t extent = v.size(dim);
  const int64_t first = start < 0 ? start + extent : start;
  FERRY_CHECK(first >= 0 && first <= extent && length >= 0 && length <= extent - first,
              InvalidArgument, "narrow: start ", start, " and length ", length,
              " do not select within dim ", dim, " of shape ", shape_str(v.shape()));
  Tensor y = slice(v, dim, first, length);
  if (!detail::should_record({&x})) return Variable(std::move(y));
  return detail::record(
      "narrow", {&x}, std::move(y),
      [shape = v.shape(), dim, first, length](const Grads& g, const Needs&) {
        // Zeros around the narrowed part.
        Shape before = shape;
        Shape after = shape;
        before[static_cast<size_t>(dim)] = first;
        after[static_cast<size_t>(dim)] = shape[static_cast<size_t>(dim)] - first - length;
        return Grads{cat({zeros(before, g[0].dtype()), g[0], zeros(after, g[0].dtype())}, dim)};
      });
}

}  // namespace ferry
