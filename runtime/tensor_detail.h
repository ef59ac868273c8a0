// Internals shared by the runtime/tensor*.cpp files. Not installed, not part of the public API:
// tensor.h only forward-declares Storage so that users never depend on its layout.
#pragma once

#include <ferry/runtime/block_cache.h>

#include <ferry/runtime/dtype.h>
#include <ferry/runtime/shape.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace ferry {
class Tensor;
}

namespace ferry::detail {

struct Storage {
  // Owned memory starts on a cache line: fresh tensors suit Eigen's vectorised maps and
  // transports that register memory, and two tensors never share their first cache line.
  static constexpr size_t kAlignment = kBlockAlignment;

  static std::shared_ptr<Storage> allocate(size_t nbytes);
  // In the process's shared arena (shared_arena.h), which the other ranks on the host can map.
  static std::shared_ptr<Storage> allocate_shared(size_t nbytes);
  static std::shared_ptr<Storage> borrow(void* data, size_t nbytes);

  Storage(std::byte* data, size_t nbytes, bool owned) : data_(data), nbytes_(nbytes), owned_(owned) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  std::byte* data_ = nullptr;  // null only for a borrowed zero-byte blob
  size_t nbytes_ = 0;
  bool owned_ = false;
  bool shared_ = false;  // owned, in the shared arena (given back there)
  std::atomic<uint64_t> version_{0};
};

// The storage of `t` (every view of it shares one).
std::shared_ptr<Storage> storage_of(const Tensor& t);
// Moves the bytes of storage `s`, which ferry owns, to fresh memory of the same kind (shared or
// not), as Tensor::share_memory_ moves them, every view of `s` following, and returns the old
// memory as a storage of its own: for an op that failed while its peers may still write into
// its output, which keeps the old memory for the life of the process (keep_until_exit), so that
// a late write reaches neither the caller's tensors nor memory given to another. Null, nothing
// moved, for memory the caller owns (from_blob) or when no memory could be had.
std::shared_ptr<Storage> move_to_fresh_memory(Storage& s) noexcept;

// Product of the dims; throws InvalidArgument naming `op` for a negative dim or int64 overflow.
int64_t checked_numel(const Shape& shape, const char* op);

// Element conversion with the rules Tensor::to documents: floating targets round to nearest
// even (with a single rounding, also from float64 and int64), integer targets truncate toward
// zero and saturate, NaN becomes 0. Ranges may overlap only when the dtypes are equal (memmove).
void convert_elements(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);
// Writes `value`, converted as above, to n consecutive elements.
void fill_elements(void* dst, DType dtype, int64_t n, double value);
double load_as_double(const void* base, DType dtype, int64_t i);
void store_from_double(void* base, DType dtype, int64_t i, double value);

// The correctly rounded conversions used by convert_elements, exposed for the tests.
half double_to_half(double value);
bfloat16 double_to_bfloat16(double value);
bfloat16 int64_to_bfloat16(int64_t value);
// Round-to-odd narrowing: the float nearest below |value| in magnitude with its last mantissa
// bit forced to 1 when the conversion is inexact. A second rounding of the result to a format
// with at most 22 significant bits equals a single rounding of `value`.
float double_to_float_odd(double value);
float int64_to_float_odd(int64_t value);

}  // namespace ferry::detail
