// ferry::Tensor: a dense, contiguous, row-major array of one DType.
//
// A Tensor is a cheap handle: copying it shares the storage (like torch.Tensor). Views (narrow,
// split and chunk along dim 0, reshape, select) share storage too and stay contiguous, which is
// what lets transports read and write tensors in place. Operations that cannot be expressed as a
// contiguous view (narrowing an inner dim, cat, to) copy and say so in their name or contract.
#pragma once

#include <ferry/runtime/dtype.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/shape.h>

#include <Eigen/Core>

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

namespace ferry {

std::string shape_str(const Shape& shape);  // "[2, 3]"
int64_t shape_numel(const Shape& shape);    // product of dims; 1 for a 0-d shape
// The shape with dim 0 replaced, [rows, shape[1:]...]; a 0-d shape counts as one row, [rows].
// Collectives count sizes in rows along dim 0, so their outputs are built this way.
Shape with_rows(const Shape& shape, int64_t rows);

template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ColVector = Eigen::Matrix<T, Eigen::Dynamic, 1>;

namespace detail {
// Owned (64-byte aligned) or borrowed memory. The version counter is bumped by every in-place
// write through ferry (fill_, copy_, collectives writing outputs); autograd uses it to detect
// a saved tensor that was modified before backward.
struct Storage;
}  // namespace detail

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor: defined() is false, every other accessor throws

  // Wraps memory the caller owns; the caller keeps it alive and contiguous while any view of it
  // exists. No copy is made.
  static Tensor from_blob(void* data, Shape shape, DType dtype);

  // The accessors a collective asks many times per call are inline (each was a call into the
  // library); on an undefined tensor they throw, as every accessor does.
  bool defined() const { return storage_ != nullptr; }
  DType dtype() const {
    if (!defined()) undefined("Tensor::dtype");
    return dtype_;
  }
  const Shape& shape() const {
    if (!defined()) undefined("Tensor::shape");
    return shape_;
  }
  int64_t dim() const {
    if (!defined()) undefined("Tensor::dim");
    return static_cast<int64_t>(shape_.size());
  }
  int64_t size(int64_t d) const {  // negative d counts from the back
    if (!defined()) undefined("Tensor::size");
    const auto rank = static_cast<int64_t>(shape_.size());
    if (d < -rank || d >= rank) size_out_of_range(d);
    return shape_[static_cast<size_t>(d < 0 ? d + rank : d)];
  }
  int64_t numel() const {
    if (!defined()) undefined("Tensor::numel");
    int64_t n = 1;
    for (int64_t d : shape_) n *= d;
    return n;
  }
  size_t element_size() const {
    if (!defined()) undefined("Tensor::element_size");
    return dtype_size(dtype_);
  }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }

  void* raw_data();
  const void* raw_data() const;
  template <class T> T* data();              // throws InvalidArgument if T is not dtype()
  template <class T> const T* data() const;

  bool shares_storage_with(const Tensor& other) const;
  // True when no other Tensor handle (copy or view) refers to this one's storage.
  bool owns_storage_alone() const;
  // Keeps the storage alive without a Tensor handle (copying a Tensor copies its shape, an
  // allocation): for requests in flight. It counts as a handle for owns_storage_alone().
  std::shared_ptr<const void> keep_alive() const { return storage_; }
  // True when the byte ranges of the two tensors overlap (same storage and intersecting).
  bool overlaps(const Tensor& other) const;
  uint64_t version() const;
  void bump_version();

  // ---- shared memory (torch's share_memory_ and is_shared) ----
  // Whether the storage lies in memory the other ranks on this host can map: their
  // collectives then read (and copy out of) this tensor straight where it lies, with no
  // system call (docs/shared-tensors.md). Views share their base's answer.
  bool is_shared() const;
  // Moves the storage there (a copy of its bytes, once), for this tensor and every view of
  // it; nothing when it is there already. Not while an op or another thread uses the tensor:
  // the bytes move. Throws InvalidArgument for a tensor made by from_blob (its memory is the
  // caller's), Error when no shared memory can be had.
  Tensor& share_memory_();

  // ---- views: share storage, never copy ----
  // A view along `dim`; only possible while the result stays contiguous, i.e. dim == 0 or every
  // dim before `dim` has size 1. Otherwise throws InvalidArgument (use narrow_copy).
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  std::vector<Tensor> split(int64_t split_size) const;            // along dim 0; last may be short
  std::vector<Tensor> split(const std::vector<int64_t>& sizes) const;  // sizes must sum to size(0)
  std::vector<Tensor> chunk(int64_t chunks) const;  // torch.chunk: ceil-sized pieces along dim 0
  Tensor reshape(Shape shape) const;                // one dim may be -1
  Tensor flatten() const;                           // 1-D view
  Tensor select(int64_t index) const;  // index along dim 0 (negative counts from the back), drops it

  // ---- copies ----
  Tensor clone() const;
  // Always a new tensor, also when dtype() == dtype. Floating targets round to nearest even
  // with a single rounding (float64 and int64 sources are not rounded through float first).
  // Integer targets truncate floats toward zero and saturate at the target's range: NaN -> 0,
  // +inf or too large -> max, -inf or too small -> min (int64 -> int32 and -1 -> uint8 saturate
  // too, unlike C++ and torch, which wrap). No conversion has undefined behaviour.
  Tensor to(DType dtype) const;
  Tensor narrow_copy(int64_t dim, int64_t start, int64_t length) const;  // any dim

  // ---- in place (bump the version) ----
  // Same numel (shapes may differ); converts dtype as to() does; src may overlap *this.
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(double value);  // value converted as to() does (e.g. -1 -> 0 for uint8)

  // ---- elements ----
  template <class T> T& at(std::initializer_list<int64_t> index);  // bounds-checked, one per dim
  template <class T> const T& at(std::initializer_list<int64_t> index) const;
  double item() const;               // the single element of a 1-element tensor, as double
  double get_flat(int64_t i) const;  // element i in row-major order, as double
  void set_flat(int64_t i, double value);  // converts as to() does; bumps the version
  template <class T> std::vector<T> to_vector() const;  // row-major; T must be dtype()

  // ---- Eigen ----
  // 2-D tensors as a row-major matrix; 1-D tensors as a one-row matrix.
  template <class T> Eigen::Map<RowMatrix<T>> matrix();
  template <class T> Eigen::Map<const RowMatrix<T>> matrix() const;
  // All elements, any rank, as a column vector.
  template <class T> Eigen::Map<ColVector<T>> vec();
  template <class T> Eigen::Map<const ColVector<T>> vec() const;

  std::string to_string() const;

 private:
  Tensor(std::shared_ptr<detail::Storage> storage, size_t offset, Shape shape, DType dtype);
  void check_defined(const char* what) const;
  [[noreturn]] void undefined(const char* what) const;  // throws InvalidArgument
  [[noreturn]] void size_out_of_range(int64_t d) const;  // throws InvalidArgument
  void check_dtype(DType wanted, const char* what) const;

  std::shared_ptr<detail::Storage> storage_;
  size_t offset_ = 0;  // bytes from the start of storage
  Shape shape_;
  DType dtype_ = DType::Float32;

  friend Tensor empty(Shape shape, DType dtype);
  friend Tensor empty_shared(Shape shape, DType dtype);
};

// ---- factories ----
Tensor empty(Shape shape, DType dtype = DType::Float32);  // uninitialised
// Uninitialised, in shared memory (Tensor::is_shared): for the buffers of collectives among
// ranks on one host. Page-granular: meant for large buffers. Throws Error when no shared
// memory can be had.
Tensor empty_shared(Shape shape, DType dtype = DType::Float32);
Tensor zeros(Shape shape, DType dtype = DType::Float32);
Tensor ones(Shape shape, DType dtype = DType::Float32);
Tensor full(Shape shape, double value, DType dtype = DType::Float32);
Tensor arange(int64_t end, DType dtype = DType::Float32);  // 0, 1, ..., end-1
Tensor arange(double start, double end, double step, DType dtype = DType::Float32);
// Uniform in [low, high) and normal(mean, stddev) from a seeded generator: the same seed gives
// the same tensor on every machine.
Tensor uniform(Shape shape, double low, double high, uint64_t seed, DType dtype = DType::Float32);
Tensor normal(Shape shape, double mean, double stddev, uint64_t seed, DType dtype = DType::Float32);
template <class T>
Tensor from_vector(const std::vector<T>& values, Shape shape);  // numel must match
template <class T>
Tensor from_vector(const std::vector<T>& values);  // 1-D
template <class T>
Tensor tensor(std::initializer_list<T> values) { return from_vector(std::vector<T>(values)); }

// Bytes of one row along dim 0 (the whole tensor for 0-d; a tensor of 0 rows still has a row
// size, from its other dims).
size_t row_bytes(const Tensor& t);

// Concatenation along `dim` (copies). All inputs share dtype and every other dim.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);

// Same dtype and shape and every element ==, so NaN != NaN and -0 == 0. Throws if either is
// undefined.
bool equal(const Tensor& a, const Tensor& b);
// |a - b| <= atol + rtol * |b| elementwise, after converting both to float64; same shape required.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace ferry
