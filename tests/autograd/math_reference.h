// Independent references for the kernel and op tests: plain loops over get_flat / set_flat in
// double, sharing no code with the kernels they check.
#pragma once

#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace ferry::testing {

// A float64 tensor of `shape` with values uniform in [low, high), seeded.
Tensor random64(const Shape& shape, uint64_t seed, double low = -2.0, double high = 2.0);
Tensor int64s(const std::vector<int64_t>& values);

// out[i] = f(a[i]) in double, returned in a's dtype.
Tensor ref_map(const Tensor& a, const std::function<double(double)>& f);
// out[i] = f(a[i], b[i]) for equal shapes, in double, returned in a's dtype.
Tensor ref_zip(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f);
// [N, K] x [K, M] by a triple loop.
Tensor ref_matmul(const Tensor& a, const Tensor& b);
// Sum along dim (non-negative) by walking every element's multi-index.
Tensor ref_sum_dim(const Tensor& a, int64_t dim, bool keepdim);
// Row-major multi-index of flat element i of shape.
std::vector<int64_t> unravel(int64_t i, const Shape& shape);
int64_t ravel(const std::vector<int64_t>& index, const Shape& shape);

}  // namespace ferry::testing
