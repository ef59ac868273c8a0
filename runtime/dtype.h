// Element types of a ferry Tensor and a visitor that turns a runtime DType into a C++ type.
#pragma once

#include <Eigen/Core>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ferry {

using half = Eigen::half;          // IEEE binary16
using bfloat16 = Eigen::bfloat16;  // brain float16 (8-bit exponent, 7-bit mantissa)

enum class DType : uint8_t { Float32, Float64, Float16, BFloat16, Int32, Int64, UInt8 };

inline constexpr DType kAllDTypes[] = {DType::Float32, DType::Float64, DType::Float16,
                                       DType::BFloat16, DType::Int32, DType::Int64,
                                       DType::UInt8};

// Inline: every tensor's size in bytes asks it, several times per collective.
inline size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "float32", "float64", "float16", "bfloat16", "int32", ...
// Parses the names dtype_name produces (also "f32", "fp16", "bf16", ... short forms);
// throws InvalidArgument for anything else.
DType dtype_from_name(std::string_view name);
bool is_floating(DType t);

template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::Float32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::Float64; };
template <> struct DTypeOf<half> { static constexpr DType value = DType::Float16; };
template <> struct DTypeOf<bfloat16> { static constexpr DType value = DType::BFloat16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::UInt8; };
template <class T> inline constexpr DType dtype_of = DTypeOf<T>::value;

// Calls f.template operator()<T>() with T the C++ type of `t`:
//   visit_dtype(t, [&]<class T>() { ... });
template <class F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Float32: return f.template operator()<float>();
    case DType::Float64: return f.template operator()<double>();
    case DType::Float16: return f.template operator()<half>();
    case DType::BFloat16: return f.template operator()<bfloat16>();
    case DType::Int32: return f.template operator()<int32_t>();
    case DType::Int64: return f.template operator()<int64_t>();
    case DType::UInt8: return f.template operator()<uint8_t>();
  }
  return f.template operator()<float>();  // unreachable: every enumerator is handled above
}

inline size_t dtype_size(DType t) {
  return visit_dtype(t, []<class T>() { return sizeof(T); });
}

}  // namespace ferry
