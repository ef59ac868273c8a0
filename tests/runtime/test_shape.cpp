// ferry::Shape: dims inline up to Shape::kInline, on the heap beyond, with the vector
// operations the code base uses; a tensor of rank up to kInline copies without allocating.
#include <ferry/runtime/shape.h>
#include <ferry/runtime/tensor.h>

#include <catch2/catch.hpp>

#include <numeric>
#include <vector>

using ferry::Shape;

namespace {

// A shape 0, 1, ..., n-1.
Shape iota_shape(size_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return Shape(v);
}

}  // namespace

TEST_CASE("Shape: inline and heap shapes read, copy and move alike", "[shape]") {
  for (size_t n : {size_t{0}, size_t{1}, Shape::kInline, Shape::kInline + 1, size_t{12}}) {
    const Shape s = iota_shape(n);
    REQUIRE(s.size() == n);
    for (size_t i = 0; i < n; ++i) REQUIRE(s[i] == static_cast<int64_t>(i));
    Shape copy = s;
    REQUIRE(copy == s);
    copy.push_back(99);  // the copy is independent of the original
    REQUIRE(copy.size() == n + 1);
    REQUIRE(s.size() == n);
    Shape moved = std::move(copy);
    REQUIRE(moved.size() == n + 1);
    REQUIRE(moved.back() == 99);
    Shape assigned;
    assigned = moved;
    REQUIRE(assigned == moved);
    assigned = s;  // a heap shape assigned a shorter one keeps working
    REQUIRE(assigned == s);
    REQUIRE(static_cast<std::vector<int64_t>>(s) == std::vector<int64_t>(s.begin(), s.end()));
  }
}

TEST_CASE("Shape: growing past the inline dims keeps every dim", "[shape]") {
  Shape s;
  for (int64_t d = 0; d < 20; ++d) s.push_back(d * 3);
  REQUIRE(s.size() == 20);
  for (int64_t d = 0; d < 20; ++d) REQUIRE(s[static_cast<size_t>(d)] == d * 3);
  s.resize(3);
  REQUIRE(s == Shape{0, 3, 6});
  s.resize(5, 7);
  REQUIRE(s == Shape{0, 3, 6, 7, 7});
}

TEST_CASE("Shape: insert and erase as a vector does", "[shape]") {
  Shape s{2, 3};
  s.insert(s.begin(), 1);
  REQUIRE(s == Shape{1, 2, 3});
  s.insert(s.end(), 4);
  REQUIRE(s == Shape{1, 2, 3, 4});
  const std::vector<int64_t> more{5, 6, 7};
  s.insert(s.begin() + 1, more.begin(), more.end());  // crosses into the heap
  REQUIRE(s == Shape{1, 5, 6, 7, 2, 3, 4});
  s.erase(s.begin());
  REQUIRE(s == Shape{5, 6, 7, 2, 3, 4});
  s.erase(s.begin() + 1, s.begin() + 3);
  REQUIRE(s == Shape{5, 2, 3, 4});
  REQUIRE(Shape{1, 2} < Shape{1, 3});
  REQUIRE(Shape{1, 2} != Shape{1, 2, 1});
  REQUIRE(Shape(3, 4) == Shape{4, 4, 4});  // (count, value), like the vector constructor
}

TEST_CASE("Shape: tensors of any rank keep their dims", "[shape]") {
  const Shape big{1, 2, 1, 3, 1, 2, 1};  // rank 7: on the heap
  ferry::Tensor t = ferry::zeros(big);
  REQUIRE(t.shape() == big);
  REQUIRE(t.numel() == 12);
  ferry::Tensor view = t.reshape({12});
  REQUIRE(view.shape() == Shape{12});
  ferry::Tensor copy = t;  // a handle copy carries the heap shape too
  REQUIRE(copy.shape() == big);
}
