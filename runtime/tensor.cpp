// Tensor core: storage, metadata, views, element access and Eigen maps.
#include <ferry/runtime/tensor.h>
#include <ferry/runtime/tensor_detail.h>

#include <ferry/runtime/block_cache.h>
#include <ferry/runtime/object_pool.h>
#include <ferry/runtime/shared_arena.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

namespace ferry {
namespace detail {

std::shared_ptr<Storage> Storage::allocate(size_t nbytes) {
  // Never a null pointer, even for zero bytes, so memcpy of 0 bytes from raw_data() is valid.
  const size_t size = nbytes == 0 ? kAlignment : nbytes;
  void* p = acquire_block(size);
  try {
    return make_pooled<Storage>(static_cast<std::byte*>(p), nbytes, true);
  } catch (...) {
    release_block(p, size);
    throw;
  }
}

std::shared_ptr<Storage> Storage::allocate_shared(size_t nbytes) {
  void* p = acquire_shared_block(nbytes, "empty_shared");
  try {
    auto s = make_pooled<Storage>(static_cast<std::byte*>(p), nbytes, true);
    s->shared_ = true;
    return s;
  } catch (...) {
    release_shared_block(p, nbytes);
    throw;
  }
}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t nbytes) {
  return make_pooled<Storage>(static_cast<std::byte*>(data), nbytes, false);
}

Storage::~Storage() {
  if (shared_)
    release_shared_block(data_, nbytes_);
  else if (owned_)
    release_block(data_, nbytes_ == 0 ? kAlignment : nbytes_);
}

std::shared_ptr<Storage> storage_of(const Tensor& t) {
  // keep_alive() hands out the storage; the tensor's own handle is private.
  return std::static_pointer_cast<Storage>(std::const_pointer_cast<void>(t.keep_alive()));
}

std::shared_ptr<Storage> move_to_fresh_memory(Storage& s) noexcept {
  if (!s.owned_ || s.nbytes_ == 0) return nullptr;
  try {
    std::shared_ptr<Storage> fresh = s.shared_ ? Storage::allocate_shared(s.nbytes_)
                                               : Storage::allocate(s.nbytes_);
    std::memcpy(fresh->data_, s.data_, s.nbytes_);
    std::swap(fresh->data_, s.data_);  // `fresh` now owns the old memory
    return fresh;
  } catch (...) {
    return nullptr;  // the old memory stays, kept for the process's life by the caller
  }
}

int64_t checked_numel(const Shape& shape, const char* op) {
  int64_t n = 1;
  for (int64_t d : shape) {
    FERRY_CHECK(d >= 0, InvalidArgument, op, ": sizes must be non-negative but shape is ",
                shape_str(shape));
    FERRY_CHECK(!__builtin_mul_overflow(n, d, &n), InvalidArgument, op, ": shape ",
                shape_str(shape), " has more elements than int64 can count");
  }
  return n;
}

}  // namespace detail

namespace {

// Elements between consecutive indices of dim `d` (row-major).
int64_t stride_of(const Shape& shape, size_t d) {
  int64_t s = 1;
  for (size_t i = d + 1; i < shape.size(); ++i) s *= shape[i];
  return s;
}

// The checks narrow and narrow_copy share: `dim` in range (returned non-negative) and
// [start, start + length) within it; otherwise InvalidArgument naming `op`.
size_t checked_narrow_dim(const char* op, const Shape& shape, int64_t dim, int64_t start,
                          int64_t length) {
  const auto rank = static_cast<int64_t>(shape.size());
  FERRY_CHECK(dim >= -rank && dim < rank, InvalidArgument, op, ": dim ", dim,
              " is out of range for a tensor of rank ", rank, " ", shape_str(shape));
  if (dim < 0) dim += rank;
  const int64_t extent = shape[static_cast<size_t>(dim)];
  FERRY_CHECK(start >= 0 && length >= 0 && start <= extent && length <= extent - start,
              InvalidArgument, op, ": start ", start, " and length ", length,
              " must select within [0, ", extent, "] of dim ", dim, " of shape ", shape_str(shape));
  return static_cast<size_t>(dim);
}

}  // namespace

Tensor::Tensor(std::shared_ptr<detail::Storage> storage, size_t offset, Shape shape, DType dtype)
    : storage_(std::move(storage)), offset_(offset), shape_(std::move(shape)), dtype_(dtype) {}

Tensor Tensor::from_blob(void* data, Shape shape, DType dtype) {
  const int64_t n = detail::checked_numel(shape, "Tensor::from_blob");
  FERRY_CHECK(data != nullptr || n == 0, InvalidArgument,
              "Tensor::from_blob: data is null but shape ", shape_str(shape), " has ", n,
              " elements");
  size_t nbytes = 0;
  FERRY_CHECK(!__builtin_mul_overflow(static_cast<size_t>(n), dtype_size(dtype), &nbytes),
              InvalidArgument, "Tensor::from_blob: shape ", shape_str(shape), " of ",
              dtype_name(dtype), " needs more bytes than size_t can count");
  return Tensor(detail::Storage::borrow(data, nbytes), 0, std::move(shape), dtype);
}

void Tensor::check_defined(const char* what) const {
  if (!defined()) undefined(what);
}

void Tensor::undefined(const char* what) const {
  FERRY_THROW(InvalidArgument, what, ": the tensor is undefined");
}

void Tensor::check_dtype(DType wanted, const char* what) const {
  check_defined(what);
  FERRY_CHECK(dtype_ == wanted, InvalidArgument, what, ": tensor has dtype ", dtype_name(dtype_),
              " but ", dtype_name(wanted), " was requested");
}

void Tensor::size_out_of_range(int64_t d) const {
  FERRY_THROW(InvalidArgument, "Tensor::size: dim ", d, " is out of range for a tensor of rank ",
              dim(), " ", shape_str(shape_));
}

void* Tensor::raw_data() {
  check_defined("Tensor::raw_data");
  return storage_->data_ == nullptr ? nullptr : storage_->data_ + offset_;
}

const void* Tensor::raw_data() const {
  check_defined("Tensor::raw_data");
  return storage_->data_ == nullptr ? nullptr : storage_->data_ + offset_;
}

template <class T>
T* Tensor::data() {
  check_dtype(dtype_of<T>, "Tensor::data");
  return static_cast<T*>(raw_data());
}

template <class T>
const T* Tensor::data() const {
  check_dtype(dtype_of<T>, "Tensor::data");
  return static_cast<const T*>(raw_data());
}

bool Tensor::owns_storage_alone() const {
  check_defined("Tensor::owns_storage_alone");
  return storage_.use_count() == 1;
}

bool Tensor::shares_storage_with(const Tensor& other) const {
  check_defined("Tensor::shares_storage_with");
  FERRY_CHECK(other.defined(), InvalidArgument,
              "Tensor::shares_storage_with: the other tensor is undefined");
  return storage_ == other.storage_;
}

bool Tensor::overlaps(const Tensor& other) const {
  if (!shares_storage_with(other)) return false;
  const size_t a_end = offset_ + nbytes();
  const size_t b_end = other.offset_ + other.nbytes();
  // Empty ranges touch no byte, so they overlap nothing.
  return nbytes() > 0 && other.nbytes() > 0 && offset_ < b_end && other.offset_ < a_end;
}

uint64_t Tensor::version() const {
  check_defined("Tensor::version");
  return storage_->version_.load(std::memory_order_acquire);
}

void Tensor::bump_version() {
  check_defined("Tensor::bump_version");
  storage_->version_.fetch_add(1, std::memory_order_acq_rel);
}

bool Tensor::is_shared() const {
  check_defined("Tensor::is_shared");
  return storage_->shared_;
}

Tensor& Tensor::share_memory_() {
  check_defined("Tensor::share_memory_");
  detail::Storage& s = *storage_;
  if (s.shared_) return *this;
  FERRY_CHECK(s.owned_, InvalidArgument, "Tensor::share_memory_: the tensor wraps memory its "
              "caller owns (from_blob), which ferry cannot move; expected a tensor ferry "
              "allocated, given one of ", s.nbytes_, " borrowed bytes");
  void* moved = detail::acquire_shared_block(s.nbytes_, "Tensor::share_memory_");
  if (s.nbytes_ > 0) std::memcpy(moved, s.data_, s.nbytes_);
  detail::release_block(s.data_, s.nbytes_ == 0 ? detail::Storage::kAlignment : s.nbytes_);
  s.data_ = static_cast<std::byte*>(moved);
  s.shared_ = true;
  return *this;
}

// ---- views ----

Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  check_defined("Tensor::narrow");
  const size_t d = checked_narrow_dim("Tensor::narrow", shape_, dim, start, length);
  const int64_t extent = shape_[d];
  Shape out_shape = shape_;
  out_shape[d] = length;
  const bool no_bytes = shape_numel(out_shape) == 0;
  bool contiguous = length == extent || no_bytes;
  if (!contiguous) {
    contiguous = true;
    for (size_t i = 0; i < d; ++i) contiguous = contiguous && shape_[i] == 1;
  }
  FERRY_CHECK(contiguous, InvalidArgument, "Tensor::narrow: narrowing dim ", d, " of shape ",
              shape_str(shape_), " is not a contiguous view (every dim before it must have size "
              "1); use narrow_copy");
  // Empty pieces still get their natural offset (split pieces stay in order for callers that
  // derive displacements from pointers), clamped so that a view of nothing never points past
  // its parent's bytes.
  const size_t skip = static_cast<size_t>(start * stride_of(shape_, d)) * element_size();
  return Tensor(storage_, offset_ + std::min(skip, nbytes()), std::move(out_shape), dtype_);
}

std::vector<Tensor> Tensor::split(int64_t split_size) const {
  check_defined("Tensor::split");
  FERRY_CHECK(dim() >= 1, InvalidArgument, "Tensor::split: needs at least 1 dim but the tensor "
              "is 0-d");
  FERRY_CHECK(split_size > 0, InvalidArgument, "Tensor::split: split_size must be positive but "
              "is ", split_size);
  const int64_t extent = shape_[0];
  std::vector<Tensor> pieces;
  if (extent == 0) pieces.push_back(*this);  // like torch: one empty piece
  for (int64_t start = 0; start < extent; start += split_size) {
    pieces.push_back(narrow(0, start, std::min(split_size, extent - start)));
  }
  return pieces;
}

std::vector<Tensor> Tensor::split(const std::vector<int64_t>& sizes) const {
  check_defined("Tensor::split");
  FERRY_CHECK(dim() >= 1, InvalidArgument, "Tensor::split: needs at least 1 dim but the tensor "
              "is 0-d");
  int64_t total = 0;
  for (int64_t s : sizes) {
    FERRY_CHECK(s >= 0, InvalidArgument, "Tensor::split: split sizes must be non-negative but "
                "one is ", s);
    total += s;
  }
  FERRY_CHECK(total == shape_[0], InvalidArgument, "Tensor::split: split sizes sum to ", total,
              " but size(0) is ", shape_[0]);
  std::vector<Tensor> pieces;
  pieces.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t s : sizes) {
    pieces.push_back(narrow(0, start, s));
    start += s;
  }
  return pieces;
}

std::vector<Tensor> Tensor::chunk(int64_t chunks) const {
  check_defined("Tensor::chunk");
  FERRY_CHECK(chunks > 0, InvalidArgument, "Tensor::chunk: chunks must be positive but is ",
              chunks);
  FERRY_CHECK(dim() >= 1, InvalidArgument, "Tensor::chunk: needs at least 1 dim but the tensor "
              "is 0-d");
  const int64_t extent = shape_[0];
  // torch.chunk keeps `chunks` empty pieces for an empty dim, since no piece size is implied.
  if (extent == 0) return split(std::vector<int64_t>(static_cast<size_t>(chunks), 0));
  return split((extent + chunks - 1) / chunks);
}

Tensor Tensor::reshape(Shape shape) const {
  check_defined("Tensor::reshape");
  int64_t known = 1;
  int64_t inferred = -1;  // index of the -1 entry
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      FERRY_CHECK(inferred < 0, InvalidArgument, "Tensor::reshape: at most one dim may be -1 "
                  "but shape is ", shape_str(shape));
      inferred = static_cast<int64_t>(i);
    } else {
      FERRY_CHECK(shape[i] >= 0, InvalidArgument, "Tensor::reshape: sizes must be >= 0 or -1 "
                  "but shape is ", shape_str(shape));
      known *= shape[i];
    }
  }
  const int64_t n = numel();
  if (inferred >= 0) {
    FERRY_CHECK(known != 0 && n % known == 0, InvalidArgument, "Tensor::reshape: cannot infer "
                "the -1 in ", shape_str(shape), " for ", n, " elements of shape ",
                shape_str(shape_));
    shape[static_cast<size_t>(inferred)] = n / known;
  } else {
    FERRY_CHECK(known == n, InvalidArgument, "Tensor::reshape: shape ", shape_str(shape),
                " has ", known, " elements but the tensor ", shape_str(shape_), " has ", n);
  }
  return Tensor(storage_, offset_, std::move(shape), dtype_);
}

Tensor Tensor::flatten() const {
  check_defined("Tensor::flatten");
  if (shape_.size() == 1) return *this;  // the same view (a codec-less pass flattens each block)
  return Tensor(storage_, offset_, Shape{numel()}, dtype_);
}

Tensor Tensor::select(int64_t index) const {
  check_defined("Tensor::select");
  FERRY_CHECK(dim() >= 1, InvalidArgument, "Tensor::select: needs at least 1 dim but the "
              "tensor is 0-d");
  const int64_t extent = shape_[0];
  FERRY_CHECK(index >= -extent && index < extent, InvalidArgument, "Tensor::select: index ",
              index, " is out of range for size(0) ", extent);
  if (index < 0) index += extent;
  Tensor row = narrow(0, index, 1);
  row.shape_.erase(row.shape_.begin());
  return row;
}

Shape with_rows(const Shape& shape, int64_t rows) {
  Shape s = shape.empty() ? Shape{1} : shape;
  s[0] = rows;
  return s;
}

size_t row_bytes(const Tensor& t) {
  if (t.dim() == 0) return t.element_size();
  if (t.size(0) > 0) return t.nbytes() / static_cast<size_t>(t.size(0));
  return static_cast<size_t>(shape_numel(with_rows(t.shape(), 1))) * t.element_size();
}

// ---- copies ----

Tensor Tensor::clone() const {
  check_defined("Tensor::clone");
  Tensor out = empty(shape_, dtype_);
  if (nbytes() > 0) std::memcpy(out.raw_data(), raw_data(), nbytes());
  return out;
}

Tensor Tensor::narrow_copy(int64_t dim, int64_t start, int64_t length) const {
  check_defined("Tensor::narrow_copy");
  const size_t d = checked_narrow_dim("Tensor::narrow_copy", shape_, dim, start, length);
  const int64_t extent = shape_[d];
  Shape out_shape = shape_;
  out_shape[d] = length;
  Tensor out = empty(std::move(out_shape), dtype_);
  if (out.numel() == 0) return out;
  int64_t outer = 1;
  for (size_t i = 0; i < d; ++i) outer *= shape_[i];
  const size_t inner_bytes = static_cast<size_t>(stride_of(shape_, d)) * element_size();
  const auto* src = static_cast<const std::byte*>(raw_data());
  auto* dst = static_cast<std::byte*>(out.raw_data());
  const size_t row_bytes = static_cast<size_t>(length) * inner_bytes;
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(dst + static_cast<size_t>(o) * row_bytes,
                src + (static_cast<size_t>(o * extent + start)) * inner_bytes, row_bytes);
  }
  return out;
}

// ---- elements ----

namespace {

int64_t flat_index(const Shape& shape, std::initializer_list<int64_t> index) {
  FERRY_CHECK(index.size() == shape.size(), InvalidArgument, "Tensor::at: got ", index.size(),
              " indices for a tensor of rank ", shape.size(), " ", shape_str(shape));
  int64_t flat = 0;
  size_t d = 0;
  for (int64_t i : index) {
    FERRY_CHECK(i >= 0 && i < shape[d], InvalidArgument, "Tensor::at: index ", i,
                " is out of range [0, ", shape[d], ") of dim ", d, " of shape ",
                shape_str(shape));
    flat = flat * shape[d] + i;
    ++d;
  }
  return flat;
}

}  // namespace

template <class T>
T& Tensor::at(std::initializer_list<int64_t> index) {
  check_dtype(dtype_of<T>, "Tensor::at");
  return data<T>()[flat_index(shape_, index)];
}

template <class T>
const T& Tensor::at(std::initializer_list<int64_t> index) const {
  check_dtype(dtype_of<T>, "Tensor::at");
  return data<T>()[flat_index(shape_, index)];
}

double Tensor::item() const {
  check_defined("Tensor::item");
  FERRY_CHECK(numel() == 1, InvalidArgument, "Tensor::item: needs exactly 1 element but shape ",
              shape_str(shape_), " has ", numel());
  return detail::load_as_double(raw_data(), dtype_, 0);
}

double Tensor::get_flat(int64_t i) const {
  check_defined("Tensor::get_flat");
  FERRY_CHECK(i >= 0 && i < numel(), InvalidArgument, "Tensor::get_flat: index ", i,
              " is out of range [0, ", numel(), ")");
  return detail::load_as_double(raw_data(), dtype_, i);
}

void Tensor::set_flat(int64_t i, double value) {
  check_defined("Tensor::set_flat");
  FERRY_CHECK(i >= 0 && i < numel(), InvalidArgument, "Tensor::set_flat: index ", i,
              " is out of range [0, ", numel(), ")");
  detail::store_from_double(raw_data(), dtype_, i, value);
  bump_version();
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  check_dtype(dtype_of<T>, "Tensor::to_vector");
  const T* p = data<T>();
  return std::vector<T>(p, p + numel());
}

// ---- Eigen ----

namespace {

std::pair<Eigen::Index, Eigen::Index> matrix_dims(const Shape& shape) {
  FERRY_CHECK(shape.size() == 1 || shape.size() == 2, InvalidArgument,
              "Tensor::matrix: needs a 1-D or 2-D tensor but shape is ", shape_str(shape));
  if (shape.size() == 1) return {1, shape[0]};
  return {shape[0], shape[1]};
}

}  // namespace

template <class T>
Eigen::Map<RowMatrix<T>> Tensor::matrix() {
  check_dtype(dtype_of<T>, "Tensor::matrix");
  const auto [rows, cols] = matrix_dims(shape_);
  return Eigen::Map<RowMatrix<T>>(data<T>(), rows, cols);
}

template <class T>
Eigen::Map<const RowMatrix<T>> Tensor::matrix() const {
  check_dtype(dtype_of<T>, "Tensor::matrix");
  const auto [rows, cols] = matrix_dims(shape_);
  return Eigen::Map<const RowMatrix<T>>(data<T>(), rows, cols);
}

template <class T>
Eigen::Map<ColVector<T>> Tensor::vec() {
  check_dtype(dtype_of<T>, "Tensor::vec");
  return Eigen::Map<ColVector<T>>(data<T>(), numel());
}

template <class T>
Eigen::Map<const ColVector<T>> Tensor::vec() const {
  check_dtype(dtype_of<T>, "Tensor::vec");
  return Eigen::Map<const ColVector<T>>(data<T>(), numel());
}

// The header declares these templates only, so their bodies (and the checks inside) are compiled
// once here for the seven element types instead of in every file that includes tensor.h.
#define FERRY_INSTANTIATE_TENSOR_MEMBERS(T)                                        \
  template T* Tensor::data<T>();                                                   \
  template const T* Tensor::data<T>() const;                                       \
  template T& Tensor::at<T>(std::initializer_list<int64_t>);                       \
  template const T& Tensor::at<T>(std::initializer_list<int64_t>) const;           \
  template std::vector<T> Tensor::to_vector<T>() const;                            \
  template Eigen::Map<RowMatrix<T>> Tensor::matrix<T>();                           \
  template Eigen::Map<const RowMatrix<T>> Tensor::matrix<T>() const;               \
  template Eigen::Map<ColVector<T>> Tensor::vec<T>();                              \
  template Eigen::Map<const ColVector<T>> Tensor::vec<T>() const;

FERRY_INSTANTIATE_TENSOR_MEMBERS(float)
FERRY_INSTANTIATE_TENSOR_MEMBERS(double)
FERRY_INSTANTIATE_TENSOR_MEMBERS(half)
FERRY_INSTANTIATE_TENSOR_MEMBERS(bfloat16)
FERRY_INSTANTIATE_TENSOR_MEMBERS(int32_t)
FERRY_INSTANTIATE_TENSOR_MEMBERS(int64_t)
FERRY_INSTANTIATE_TENSOR_MEMBERS(uint8_t)
#undef FERRY_INSTANTIATE_TENSOR_MEMBERS

}  // namespace ferry
