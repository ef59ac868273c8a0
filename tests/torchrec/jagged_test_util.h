// Small helpers shared by the jagged-type tests.
#pragma once

#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <vector>

namespace ferry::torchrec::testing {

// Elements of an int32 / int64 / float tensor as int64 (exact for the small ints used here).
inline std::vector<int64_t> iv(const Tensor& t) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(static_cast<int64_t>(t.get_flat(i)));
  return out;
}

inline std::vector<double> dv(const Tensor& t) {
  std::vector<double> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(t.get_flat(i));
  return out;
}

inline Tensor i64(std::vector<int64_t> v) { return from_vector(v); }
inline Tensor i32(std::vector<int32_t> v) { return from_vector(v); }
inline Tensor f32(std::vector<float> v) { return from_vector(v); }

using V = std::vector<int64_t>;

}  // namespace ferry::torchrec::testing
