#include <ferry/runtime/dtype.h>

#include <ferry/runtime/error.h>

#include <algorithm>
#include <cctype>
#include <string>

namespace ferry {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::UInt8: return "uint8";
  }
  // A value cast from an out-of-range integer; naming it beats crashing while printing an error.
  return "invalid";
}

namespace {

struct Alias {
  const char* name;
  DType dtype;
};

// The short forms are the spellings users bring from numpy, torch and C (FERRY_* settings,
// ferry-bench flags), so a config written for those tools parses here too.
constexpr Alias kAliases[] = {
    {"f32", DType::Float32},  {"float", DType::Float32},  {"f64", DType::Float64},
    {"double", DType::Float64}, {"f16", DType::Float16},  {"fp16", DType::Float16},
    {"half", DType::Float16}, {"bf16", DType::BFloat16}, {"i32", DType::Int32},
    {"int", DType::Int32},    {"i64", DType::Int64},     {"long", DType::Int64},
    {"u8", DType::UInt8},
};

}  // namespace

DType dtype_from_name(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (DType t : kAllDTypes) {
    if (lower == dtype_name(t)) return t;
  }
  for (const Alias& a : kAliases) {
    if (lower == a.name) return a.dtype;
  }
  std::string valid;
  for (DType t : kAllDTypes) valid += std::string(valid.empty() ? "" : ", ") + dtype_name(t);
  for (const Alias& a : kAliases) valid += std::string(", ") + a.name;
  FERRY_THROW(InvalidArgument, "dtype_from_name: unknown dtype '", name, "'; expected one of ",
              valid);
}

bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 ||
         t == DType::BFloat16;
}

}  // namespace ferry
