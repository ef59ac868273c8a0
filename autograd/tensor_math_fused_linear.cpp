// The fused linear layer: one GEMM plus one pass for bias and activation, and its backward
// with the ReLU mask applied once to the incoming gradient. With intra-op threads
// (runtime/intra_op.h) large GEMMs are split into blocks of rows of their output, each the
// product of the matching rows (or columns) of one factor with the whole other.
#include <ferry/autograd/tensor_math.h>
#include <ferry/autograd/tensor_math_detail.h>

#include <ferry/runtime/intra_op.h>

#include <algorithm>
#include <utility>

namespace ferry::kernels {

namespace {

constexpr const char* kOp = "linear";

// f(r0, r1) over blocks of rows of an output of `rows` rows, each of about 2^19 multiply-adds
// or more (tens of microseconds: handing a block to a helper thread costs little beside it).
// Blocks start at multiples of Eigen's row panel (mr: 24 floats or 12 doubles on AVX2): its
// kernel adds the rows of a panel together, and the last rows of a product that fill no whole
// panel in narrower code that adds in another order, so a block boundary inside a panel would
// change those rows' last bits. At panel boundaries every block's panels are the whole's.
template <class T, class F>
void for_row_blocks(int64_t rows, int64_t multiply_adds_per_row, F&& f) {
  constexpr int64_t kPanel = Eigen::internal::gebp_traits<T, T>::mr;
  const int64_t panels = (rows + kPanel - 1) / kPanel;
  const int64_t per_panel = kPanel * std::max<int64_t>(1, multiply_adds_per_row);
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 19) / per_panel);
  ferry::detail::parallel_for(panels, grain, [&](int64_t p0, int64_t p1) {
    f(p0 * kPanel, std::min(rows, p1 * kPanel));
  });
}

void check_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  detail::check_same_float(kOp, x, w);
  FERRY_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1), InvalidArgument,
              "linear: expected input [N, K] and weight [M, K] but got ", shape_str(x.shape()),
              " and ", shape_str(w.shape()));
  if (b.defined()) {
    detail::check_same_float(kOp, x, b);
    FERRY_CHECK(b.dim() == 1 && b.size(0) == w.size(0), InvalidArgument,
                "linear: expected bias [", w.size(0), "] for weight ", shape_str(w.shape()),
                " but got ", shape_str(b.shape()));
  }
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, Activation act) {
  check_linear(x, w, b);
  const int64_t n = x.size(0), m = w.size(0);
  Tensor y = empty({n, m}, x.dtype());
  detail::visit_float(kOp, x.dtype(), [&]<class T>() {
    for_row_blocks<T>(n, m * x.size(1), [&](int64_t r0, int64_t r1) {
      auto out = y.matrix<T>().middleRows(r0, r1 - r0);
      // With K == 0 Eigen writes zeros, the empty sum.
      out.noalias() = x.matrix<T>().middleRows(r0, r1 - r0) * w.matrix<T>().transpose();
      if (!b.defined() && act == Activation::None) return;
      T* o = y.data<T>() + r0 * m;
      const T* bias = b.defined() ? b.data<T>() : nullptr;
      const bool relu = act == Activation::Relu;
      for (int64_t r = r0; r < r1; ++r, o += m) {
        for (int64_t c = 0; c < m; ++c) {
          const T v = bias != nullptr ? o[c] + bias[c] : o[c];
          o[c] = relu && v < T(0) ? T(0) : v;  // keeps NaN (NaN < 0 is false), as torch's relu
        }
      }
    });
  });
  return y;
}

LinearGrads linear_backward(const Tensor& g, const Tensor& x, const Tensor& w, const Tensor& y,
                            Activation act, bool need_x, bool need_w, bool need_b) {
  // x is needed (and given) only for dw, w only for dx: the shapes come from g and them.
  FERRY_CHECK(g.dim() == 2 && (!x.defined() || x.size(0) == g.size(0)) &&
                  (!w.defined() || w.size(0) == g.size(1)),
              InvalidArgument, "linear: the gradient ", shape_str(g.shape()),
              " does not match the output of input ",
              x.defined() ? shape_str(x.shape()) : std::string("[N, K]"), " and weight ",
              w.defined() ? shape_str(w.shape()) : std::string("[M, K]"));
  FERRY_CHECK((!need_x || w.defined()) && (!need_w || x.defined()) &&
                  (act != Activation::Relu || y.defined()),
              InvalidArgument, "linear: backward needs the weight for dx, the input for dw and "
              "the output for the ReLU mask");
  LinearGrads out;
  detail::visit_float(kOp, g.dtype(), [&]<class T>() {
    Tensor masked = g;
    if (act == Activation::Relu) {
      masked = empty(g.shape(), g.dtype());
      const T* gi = g.data<T>();
      const T* yi = y.data<T>();
      T* mo = masked.data<T>();
      for (int64_t i = 0, e = g.numel(); i < e; ++i) mo[i] = yi[i] > T(0) ? gi[i] : T(0);
    }
    const auto gm = std::as_const(masked).matrix<T>();
    const int64_t n = g.size(0), m = g.size(1);
    if (need_x) {  // dx = g w, by rows of dx
      const int64_t k = w.size(1);
      out.x = empty({n, k}, g.dtype());
      for_row_blocks<T>(n, m * k, [&](int64_t r0, int64_t r1) {
        out.x.matrix<T>().middleRows(r0, r1 - r0).noalias() =
            gm.middleRows(r0, r1 - r0) * w.matrix<T>();
      });
    }
    if (need_w) {  // dw = g^T x, by rows of dw (columns of g)
      const int64_t k = x.size(1);
      out.w = empty({m, k}, g.dtype());
      for_row_blocks<T>(m, n * k, [&](int64_t r0, int64_t r1) {
        out.w.matrix<T>().middleRows(r0, r1 - r0).noalias() =
            gm.middleCols(r0, r1 - r0).transpose() * x.matrix<T>();
      });
    }
    if (need_b) {
      out.b = empty({g.size(1)}, g.dtype());
      out.b.matrix<T>() = gm.colwise().sum();
    }
  });
  return out;
}

}  // namespace ferry::kernels
