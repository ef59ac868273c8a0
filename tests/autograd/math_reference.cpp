// The loop references declared in math_reference.h.
#include "math_reference.h"

namespace ferry::testing {

Tensor random64(const Shape& shape, uint64_t seed, double low, double high) {
  return uniform(shape, low, high, seed, DType::Float64);
}

Tensor int64s(const std::vector<int64_t>& values) { return from_vector(values); }

Tensor ref_map(const Tensor& a, const std::function<double(double)>& f) {
  Tensor out = zeros(a.shape(), DType::Float64);
  for (int64_t i = 0; i < a.numel(); ++i) out.set_flat(i, f(a.get_flat(i)));
  return out.to(a.dtype());
}

Tensor ref_zip(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f) {
  Tensor out = zeros(a.shape(), DType::Float64);
  for (int64_t i = 0; i < a.numel(); ++i) out.set_flat(i, f(a.get_flat(i), b.get_flat(i)));
  return out.to(a.dtype());
}

Tensor ref_matmul(const Tensor& a, const Tensor& b) {
  const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
  Tensor out = zeros({n, m}, DType::Float64);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += a.get_flat(i * k + p) * b.get_flat(p * m + j);
      out.set_flat(i * m + j, acc);
    }
  }
  return out.to(a.dtype());
}

std::vector<int64_t> unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = i % shape[d];
    i /= shape[d];
  }
  return index;
}

int64_t ravel(const std::vector<int64_t>& index, const Shape& shape) {
  int64_t i = 0;
  for (size_t d = 0; d < shape.size(); ++d) i = i * shape[d] + index[d];
  return i;
}

Tensor ref_sum_dim(const Tensor& a, int64_t dim, bool keepdim) {
  Shape kept = a.shape();
  kept[static_cast<size_t>(dim)] = 1;
  Tensor out = zeros(kept, DType::Float64);
  for (int64_t i = 0; i < a.numel(); ++i) {
    std::vector<int64_t> index = unravel(i, a.shape());
    index[static_cast<size_t>(dim)] = 0;
    const int64_t j = ravel(index, kept);
    out.set_flat(j, out.get_flat(j) + a.get_flat(i));
  }
  if (!keepdim) {
    Shape dropped = a.shape();
    dropped.erase(dropped.begin() + dim);
    out = out.reshape(dropped);
  }
  return out.to(a.dtype());
}

}  // namespace ferry::testing
