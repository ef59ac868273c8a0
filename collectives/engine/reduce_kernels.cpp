#include <ferry/collectives/engine/reduce_kernels.h>

#include <ferry/runtime/error.h>

#include <algorithm>
#include <type_traits>

namespace ferry::detail {
namespace {

// Integer sums and products wrap around like unsigned arithmetic (no undefined behaviour).
template <class T>
T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <class T>
T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    using Wide = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    return static_cast<T>(static_cast<U>(static_cast<Wide>(static_cast<U>(a)) *
                                         static_cast<Wide>(static_cast<U>(b))));
  } else {
    return a * b;
  }
}

template <class T, class F>
void apply(T* out, const T* a, const T* b, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
}

}  // namespace

void combine(void* out, const void* a, const void* b, size_t count, DType dtype, ReduceOp op) {
  FERRY_CHECK(dtype != DType::Float16 && dtype != DType::BFloat16, Error,
              "combine: 16-bit floats are reduced in float32 (internal error)");
  visit_dtype(dtype, [&]<class T>() {
    T* o = static_cast<T*>(out);
    const T* x = static_cast<const T*>(a);
    const T* y = static_cast<const T*>(b);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        apply(o, x, y, count, [](T p, T q) { return wrap_add(p, q); });
        break;
      case ReduceOp::Prod:
        apply(o, x, y, count, [](T p, T q) { return wrap_mul(p, q); });
        break;
      case ReduceOp::Min:  // NaN wins, as in torch.minimum
        apply(o, x, y, count, [](T p, T q) { return (p != p || p < q) ? p : q; });
        break;
      case ReduceOp::Max:
        apply(o, x, y, count, [](T p, T q) { return (p != p || p > q) ? p : q; });
        break;
    }
  });
}

DType accumulation_dtype(DType dtype) {
  return (dtype == DType::Float16 || dtype == DType::BFloat16) ? DType::Float32 : dtype;
}

void divide(void* data, size_t count, DType dtype, double divisor) {
  if (dtype == DType::Float32) {
    float* p = static_cast<float*>(data);
    const float d = static_cast<float>(divisor);
    for (size_t i = 0; i < count; ++i) p[i] /= d;
  } else if (dtype == DType::Float64) {
    double* p = static_cast<double*>(data);
    for (size_t i = 0; i < count; ++i) p[i] /= divisor;
  } else {
    FERRY_THROW(Error, "divide: expected float32 or float64 (internal error), given ",
                dtype_name(dtype));
  }
}

}  // namespace ferry::detail
