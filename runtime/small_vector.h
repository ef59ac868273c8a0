// A vector that holds its first N elements inline (internal, not installed): the per-call
// lists of an operation (its pending requests, the copies a transport has due) are short, and
// a std::vector would allocate for each of them at every call. Past N it moves its elements to
// the heap and grows as std::vector does. Only what the engine needs: append, drop the
// last, resize, iterate, index, clear.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace ferry::detail {

template <class T, size_t N>
class SmallVector {
  static_assert(N > 0);

 public:
  SmallVector() = default;
  SmallVector(const SmallVector&) = delete;
  SmallVector& operator=(const SmallVector&) = delete;
  ~SmallVector() {
    clear();
    if (data_ != inline_data()) ::operator delete(static_cast<void*>(data_));
  }

  template <class... Args>
  T& emplace_back(Args&&... args) {
    if (size_ == capacity_) grow();
    T* at = ::new (static_cast<void*>(data_ + size_)) T(std::forward<Args>(args)...);
    size_ += 1;
    return *at;
  }
  void push_back(T value) { emplace_back(std::move(value)); }
  void pop_back() noexcept {
    size_ -= 1;
    data_[size_].~T();
  }
  // Grows to `n` elements (the new ones value-initialised) or drops those past it.
  void resize(size_t n) {
    while (size_ > n) pop_back();
    while (size_ < n) emplace_back();
  }
  // Destroys the elements; keeps the storage.
  void clear() noexcept {
    std::destroy(data_, data_ + size_);
    size_ = 0;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T& back() { return data_[size_ - 1]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  T* inline_data() { return std::launder(reinterpret_cast<T*>(inline_)); }
  void grow() {
    const size_t capacity = 2 * capacity_;
    T* bigger = static_cast<T*>(::operator new(capacity * sizeof(T)));
    for (size_t i = 0; i < size_; ++i) {
      ::new (static_cast<void*>(bigger + i)) T(std::move(data_[i]));
      data_[i].~T();
    }
    if (data_ != inline_data()) ::operator delete(static_cast<void*>(data_));
    data_ = bigger;
    capacity_ = capacity;
  }

  static_assert(alignof(T) <= alignof(std::max_align_t));
  alignas(T) unsigned char inline_[N * sizeof(T)];
  T* data_ = inline_data();
  size_t size_ = 0;
  size_t capacity_ = N;
};

}  // namespace ferry::detail
