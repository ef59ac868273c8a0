// Comparison and printing: equal, allclose, shape_str, shape_numel, to_string / operator<<.
#include <ferry/runtime/tensor.h>
#include <ferry/runtime/tensor_detail.h>

#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>
#include <string>

namespace ferry {

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool equal(const Tensor& a, const Tensor& b) {
  FERRY_CHECK(a.defined() && b.defined(), InvalidArgument, "equal: ",
              a.defined() ? "second" : "first", " tensor is undefined");
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  // Compared in the element type: int64 values beyond 2^53 would collide as doubles.
  return visit_dtype(a.dtype(), [&]<class T>() {
    const T* x = a.data<T>();
    const T* y = b.data<T>();
    for (int64_t i = 0, n = a.numel(); i < n; ++i) {
      if (!(x[i] == y[i])) return false;
    }
    return true;
  });
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  FERRY_CHECK(a.defined() && b.defined(), InvalidArgument, "allclose: ",
              a.defined() ? "second" : "first", " tensor is undefined");
  FERRY_CHECK(a.shape() == b.shape(), InvalidArgument, "allclose: shapes must match but are ",
              shape_str(a.shape()), " and ", shape_str(b.shape()));
  const void* pa = a.raw_data();
  const void* pb = b.raw_data();
  for (int64_t i = 0, n = a.numel(); i < n; ++i) {
    const double x = detail::load_as_double(pa, a.dtype(), i);
    const double y = detail::load_as_double(pb, b.dtype(), i);
    // Equal values are close, also equal infinities (whose difference is NaN). Otherwise an
    // infinity is close to nothing, though rtol * inf would accept any pair; NaN never is.
    if (x == y) continue;
    if (!std::isfinite(x) || !std::isfinite(y)) return false;
    if (!(std::fabs(x - y) <= atol + rtol * std::fabs(y))) return false;
  }
  return true;
}

namespace {

// Like torch: above this many elements, print only the edges of every long dim.
constexpr int64_t kSummarizeThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr const char* kPrefix = "tensor(";

class Printer {
 public:
  Printer(const Tensor& t, std::ostream& os)
      : t_(t), os_(os), summarize_(t.numel() > kSummarizeThreshold) {}

  void print() {
    os_ << kPrefix;
    if (t_.numel() == 0) {
      os_ << "[]";
    } else {
      print_dim(0, 0);
    }
    os_ << ", shape=" << shape_str(t_.shape()) << ", dtype=" << dtype_name(t_.dtype()) << ")";
  }

 private:
  // Prints the sub-tensor of dims [d, rank) that starts at row-major element `first`.
  void print_dim(size_t d, int64_t first) {
    const Shape& shape = t_.shape();
    if (d == shape.size()) {
      print_element(first);
      return;
    }
    int64_t stride = 1;
    for (size_t k = d + 1; k < shape.size(); ++k) stride *= shape[k];
    const int64_t extent = shape[d];
    const bool elide = summarize_ && extent > 2 * kEdgeItems;
    const bool innermost = d + 1 == shape.size();
    // Rows of a matrix go on their own lines, blocks of higher dims get blank lines between.
    std::string separator = ",";
    if (innermost) {
      separator += " ";
    } else {
      separator += std::string(shape.size() - d - 1, '\n');
      separator += std::string(std::char_traits<char>::length(kPrefix) + d + 1, ' ');
    }
    os_ << "[";
    for (int64_t i = 0; i < extent; ++i) {
      if (elide && i == kEdgeItems) {
        os_ << "..." << separator;
        i = extent - kEdgeItems;
      }
      print_dim(d + 1, first + i * stride);
      if (i + 1 < extent) os_ << separator;
    }
    os_ << "]";
  }

  void print_element(int64_t i) {
    if (t_.dtype() == DType::Int64) {
      os_ << static_cast<const int64_t*>(t_.raw_data())[i];  // may not fit a double exactly
      return;
    }
    const double v = detail::load_as_double(t_.raw_data(), t_.dtype(), i);
    if (!is_floating(t_.dtype())) {
      os_ << static_cast<int64_t>(v);  // int32 and uint8 are exact as double
      return;
    }
    int digits = 6;
    if (t_.dtype() == DType::Float64) digits = 10;
    if (t_.dtype() == DType::Float16 || t_.dtype() == DType::BFloat16) digits = 4;
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
    std::string s = buf;
    // Mark whole floats with a trailing dot ("1.") so they read as floats, as torch does.
    if (std::isfinite(v) && s.find_first_of(".e") == std::string::npos) s += ".";
    os_ << s;
  }

  const Tensor& t_;
  std::ostream& os_;
  bool summarize_;
};

}  // namespace

std::string Tensor::to_string() const {
  std::ostringstream os;
  os << *this;
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  Printer(t, os).print();
  return os;
}

}  // namespace ferry
