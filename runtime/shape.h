// ferry::Shape: a tensor's dims, held inline.
//
// Every Tensor carries its shape, and handles are copied all the time (into autograd nodes,
// requests, vectors of inputs): as a std::vector each copy was a heap allocation, about half
// of a training step's. A Shape keeps up to kInline dims inside the object and goes to the heap
// only beyond that, so copying a tensor of rank <= kInline allocates nothing.
//
// It reads like the std::vector<int64_t> it replaces (size, operator[], iterators, push_back,
// insert, erase, comparison) and converts to and from one, so code that wants a vector still
// gets one (that conversion allocates, as any vector does).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <vector>

namespace ferry {

class Shape {
 public:
  static constexpr size_t kInline = 5;

  using value_type = int64_t;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  using pointer = int64_t*;
  using const_pointer = const int64_t*;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  Shape(size_t count, int64_t value) { resize(count, value); }
  // Implicit, like the vector it replaces: every function that took a shape as a vector still
  // accepts one.
  Shape(const std::vector<int64_t>& dims) { assign(dims.begin(), dims.end()); }  // NOLINT
  template <class It, class = typename std::iterator_traits<It>::iterator_category>
  Shape(It first, It last) {
    assign(first, last);
  }

  // A shape of up to kInline dims is copied as its whole inline array, a few moves with no
  // call: tensors are copied tens of times per collective.
  Shape(const Shape& other) {
    if (other.heap_) {
      assign(other.begin(), other.end());
    } else {
      std::copy(std::begin(other.inline_), std::end(other.inline_), inline_);
      size_ = other.size_;
    }
  }
  Shape(Shape&& other) noexcept { take(std::move(other)); }
  Shape& operator=(const Shape& other) {
    if (this == &other) return *this;
    if (other.heap_ || heap_) {
      assign(other.begin(), other.end());
    } else {
      std::copy(std::begin(other.inline_), std::end(other.inline_), inline_);
      size_ = other.size_;
    }
    return *this;
  }
  Shape& operator=(Shape&& other) noexcept {
    if (this != &other) take(std::move(other));
    return *this;
  }
  Shape& operator=(std::initializer_list<int64_t> dims) {
    assign(dims.begin(), dims.end());
    return *this;
  }

  // The dims as a vector (allocates).
  operator std::vector<int64_t>() const { return std::vector<int64_t>(begin(), end()); }  // NOLINT
  std::vector<int64_t> to_vector() const { return std::vector<int64_t>(begin(), end()); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t* data() { return heap_ ? heap_.get() : inline_; }
  const int64_t* data() const { return heap_ ? heap_.get() : inline_; }
  int64_t& operator[](size_t i) { return data()[i]; }
  const int64_t& operator[](size_t i) const { return data()[i]; }
  int64_t& front() { return data()[0]; }
  const int64_t& front() const { return data()[0]; }
  int64_t& back() { return data()[size_ - 1]; }
  const int64_t& back() const { return data()[size_ - 1]; }

  iterator begin() { return data(); }
  iterator end() { return data() + size_; }
  const_iterator begin() const { return data(); }
  const_iterator end() const { return data() + size_; }
  const_iterator cbegin() const { return begin(); }
  const_iterator cend() const { return end(); }
  std::reverse_iterator<iterator> rbegin() { return std::reverse_iterator<iterator>(end()); }
  std::reverse_iterator<iterator> rend() { return std::reverse_iterator<iterator>(begin()); }
  std::reverse_iterator<const_iterator> rbegin() const {
    return std::reverse_iterator<const_iterator>(end());
  }
  std::reverse_iterator<const_iterator> rend() const {
    return std::reverse_iterator<const_iterator>(begin());
  }

  void clear() { size_ = 0; }
  void reserve(size_t n) { grow_to(n); }
  void resize(size_t n, int64_t value = 0) {
    grow_to(n);
    std::fill(data() + std::min<size_t>(n, size_), data() + n, value);
    size_ = static_cast<uint32_t>(n);
  }
  void push_back(int64_t value) {
    grow_to(size_ + 1);
    data()[size_++] = value;
  }
  void pop_back() { --size_; }
  template <class It>
  void assign(It first, It last) {
    const auto n = static_cast<size_t>(std::distance(first, last));
    size_ = 0;
    grow_to(n);
    std::copy(first, last, data());
    size_ = static_cast<uint32_t>(n);
  }
  // Inserts before `pos`; returns the position of the inserted dim.
  iterator insert(const_iterator pos, int64_t value) {
    const auto at = static_cast<size_t>(pos - begin());
    grow_to(size_ + 1);
    int64_t* d = data();
    std::copy_backward(d + at, d + size_, d + size_ + 1);
    d[at] = value;
    ++size_;
    return d + at;
  }
  // Inserts [first, last) before `pos`.
  template <class It, class = typename std::iterator_traits<It>::iterator_category>
  iterator insert(const_iterator pos, It first, It last) {
    const auto at = static_cast<size_t>(pos - begin());
    const auto n = static_cast<size_t>(std::distance(first, last));
    grow_to(size_ + n);
    int64_t* d = data();
    std::copy_backward(d + at, d + size_, d + size_ + n);
    std::copy(first, last, d + at);
    size_ += static_cast<uint32_t>(n);
    return d + at;
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const auto at = static_cast<size_t>(first - begin());
    const auto n = static_cast<size_t>(last - first);
    int64_t* d = data();
    std::copy(d + at + n, d + size_, d + at);
    size_ -= static_cast<uint32_t>(n);
    return d + at;
  }

  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.size_ != b.size_) return false;
    const int64_t* x = a.data();
    const int64_t* y = b.data();
    for (size_t i = 0; i < a.size_; ++i)  // a few dims: no call into memcmp
      if (x[i] != y[i]) return false;
    return true;
  }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }
  friend bool operator<(const Shape& a, const Shape& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  // Makes room for n dims, keeping the first size_.
  void grow_to(size_t n) {
    if (n <= capacity_) return;
    const size_t cap = std::max<size_t>(n, 2 * size_t{capacity_});
    std::unique_ptr<int64_t[]> bigger(new int64_t[cap]);
    std::copy(begin(), end(), bigger.get());
    heap_ = std::move(bigger);
    capacity_ = static_cast<uint32_t>(cap);
  }
  void take(Shape&& other) noexcept {
    if (other.heap_) {
      heap_ = std::move(other.heap_);
      capacity_ = other.capacity_;
    } else {
      heap_.reset();
      capacity_ = kInline;
      std::copy(std::begin(other.inline_), std::end(other.inline_), inline_);
    }
    size_ = other.size_;
    other.capacity_ = kInline;
    other.size_ = 0;
  }

  uint32_t size_ = 0;
  uint32_t capacity_ = kInline;
  std::unique_ptr<int64_t[]> heap_;  // set only beyond kInline dims
  int64_t inline_[kInline] = {};
};

}  // namespace ferry
