#include <ferry/collectives/torchrec/models/dot_interaction.h>

#include <ferry/autograd/function.h>
#include <ferry/runtime/error.h>

#include <Eigen/Core>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace ferry::torchrec {

namespace {

// Vector-register-sized chunks: an Eigen array of this fixed length compiles to one SIMD
// instruction per operation (16 floats = one AVX-512 register, two AVX2 ones), where a loop over
// a runtime length of 1-26 pairs would spend more time in its prologue and tail than in
// arithmetic (and GCC, left to itself, multiplies such short loops lane by lane).
constexpr int64_t kLanes = 16;
template <class T>
using Lanes = Eigen::Array<T, kLanes, 1>;

int64_t round_up(int64_t v) { return (v + kLanes - 1) / kLanes * kLanes; }

// Per-thread scratch reused across calls: the step allocates nothing here once warm.
template <class T>
std::vector<T>& scratch(size_t size) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < size) buffer.resize(size);
  return buffer;
}

// X_k of sample b: the dense output for k = 0, embedding k - 1 otherwise.
template <class T>
const T* feature_row(const T* dense, const T* sparse, int64_t b, int64_t k, int64_t F,
                     int64_t D) {
  return k == 0 ? dense + b * D : sparse + (b * F + (k - 1)) * D;
}

template <class T>
void forward_kernel(const T* dense, const T* sparse, T* out, int64_t B, int64_t F, int64_t D) {
  const int64_t n = F + 1, width = D + n * (n - 1) / 2;
  const int64_t np = round_up(n);
  // xt[d * np + k] = X_k[d], zero-padded to np columns: row i of the Gram matrix is then
  // sum_d X_i[d] * xt[d, :], whole registers at a time.
  std::vector<T>& xt = scratch<T>(static_cast<size_t>(D * np));
  std::fill(xt.begin(), xt.end(), T(0));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t k = 0; k < n; ++k) {
      const T* x = feature_row(dense, sparse, b, k, F, D);
      for (int64_t d = 0; d < D; ++d) xt[static_cast<size_t>(d * np + k)] = x[d];
    }
    T* o = out + b * width;
    std::copy(dense + b * D, dense + (b + 1) * D, o);
    T* pair = o + D;
    for (int64_t i = 0; i + 1 < n; ++i) {
      const T* xi = feature_row(dense, sparse, b, i, F, D);
      // Columns j > i only, from the chunk that holds i + 1.
      for (int64_t c = (i + 1) / kLanes * kLanes; c < n; c += kLanes) {
        Lanes<T> acc = Lanes<T>::Zero();
        for (int64_t d = 0; d < D; ++d) {
          acc += xi[d] * Eigen::Map<const Lanes<T>>(xt.data() + d * np + c);
        }
        const int64_t first = std::max(c, i + 1), last = std::min(c + kLanes, n);
        for (int64_t j = first; j < last; ++j) *pair++ = acc[j - c];
      }
    }
  }
}

template <class T>
void backward_kernel(const T* dense, const T* sparse, const T* grad, T* d_dense, T* d_sparse,
                     int64_t B, int64_t F, int64_t D) {
  const int64_t n = F + 1, width = D + n * (n - 1) / 2;
  const int64_t dp = round_up(D);
  // x[k * dp + d] = X_k[d] and g[i * n + j] = the pair (i, j)'s gradient, symmetric, diagonal 0.
  std::vector<T>& x = scratch<T>(static_cast<size_t>(n * dp + n * n));
  T* g = x.data() + n * dp;
  std::fill(x.begin(), x.begin() + n * dp, T(0));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t k = 0; k < n; ++k) {
      const T* row = feature_row(dense, sparse, b, k, F, D);
      std::copy(row, row + D, x.data() + k * dp);
    }
    const T* gp = grad + b * width + D;
    for (int64_t i = 0; i < n; ++i) {
      g[i * n + i] = T(0);
      for (int64_t j = i + 1; j < n; ++j) g[i * n + j] = g[j * n + i] = *gp++;
    }
    for (int64_t i = 0; i < n; ++i) {
      T* dst = i == 0 ? d_dense + b * D : d_sparse + (b * F + (i - 1)) * D;
      for (int64_t c = 0; c < dp; c += kLanes) {
        Lanes<T> acc = Lanes<T>::Zero();
        // j == i is skipped rather than multiplied by 0, so an infinite X_i cannot make a NaN.
        for (int64_t j = 0; j < n; ++j) {
          if (j != i) acc += g[i * n + j] * Eigen::Map<const Lanes<T>>(x.data() + j * dp + c);
        }
        const int64_t last = std::min(c + kLanes, D);
        if (i == 0) {
          const T* pass = grad + b * width;  // the dense output's own columns
          for (int64_t d = c; d < last; ++d) dst[d] = pass[d] + acc[d - c];
        } else {
          for (int64_t d = c; d < last; ++d) dst[d] = acc[d - c];
        }
      }
    }
  }
}

template <class F>
void visit(DType dtype, F&& f) {
  if (dtype == DType::Float32) f.template operator()<float>();
  else f.template operator()<double>();
}

class DotInteraction final : public Function {
 public:
  DotInteraction(int64_t f, int64_t d) : f_(f), d_(d) {}
  std::string name() const override { return "dot_interaction"; }

  std::vector<Tensor> forward(Context& ctx, const std::vector<Tensor>& in) override {
    const int64_t B = in[0].size(0), n = f_ + 1;
    Tensor out = empty({B, d_ + n * (n - 1) / 2}, in[0].dtype());
    visit(in[0].dtype(), [&]<class T>() {
      forward_kernel<T>(in[0].data<T>(), in[1].data<T>(), out.data<T>(), B, f_, d_);
    });
    ctx.save_for_backward({in[0], in[1]});
    return {out};
  }

  std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& grads) override {
    const std::vector<Tensor> saved = ctx.saved();
    const Tensor& dense = saved[0];
    const Tensor& sparse = saved[1];
    Tensor d_dense = empty(dense.shape(), dense.dtype());
    Tensor d_sparse = empty(sparse.shape(), sparse.dtype());
    visit(dense.dtype(), [&]<class T>() {
      backward_kernel<T>(dense.data<T>(), sparse.data<T>(), grads[0].data<T>(),
                         d_dense.data<T>(), d_sparse.data<T>(), dense.size(0), f_, d_);
    });
    return {ctx.needs_input_grad(0) ? d_dense : Tensor(),
            ctx.needs_input_grad(1) ? d_sparse : Tensor()};
  }

 private:
  int64_t f_, d_;
};

}  // namespace

Variable dot_interaction(const Variable& dense_out, const Variable& sparse,
                         int64_t num_sparse_features) {
  const int64_t F = num_sparse_features;
  FERRY_CHECK(dense_out.defined() && sparse.defined(), InvalidArgument,
              "dot_interaction: dense_out and sparse must be defined");
  const int64_t D = dense_out.dim() == 2 ? dense_out.size(1) : -1;
  const bool fits = F >= 1 && D >= 1 && sparse.dim() == 2 && sparse.size(1) == F * D &&
                    sparse.size(0) == dense_out.size(0);
  FERRY_CHECK(fits, InvalidArgument, "dot_interaction: expected dense_out [B, D] and sparse "
              "[B, ", F, " * D] (", F, " features) but got ", shape_str(dense_out.shape()),
              " and ", shape_str(sparse.shape()));
  const DType dtype = dense_out.value().dtype();
  FERRY_CHECK((dtype == DType::Float32 || dtype == DType::Float64) &&
                  sparse.value().dtype() == dtype,
              InvalidArgument, "dot_interaction: dense_out and sparse must share a float32 or "
              "float64 dtype (got ", dtype_name(dtype), " and ",
              dtype_name(sparse.value().dtype()), ")");
  return apply(std::make_shared<DotInteraction>(F, D), {dense_out, sparse})[0];
}

}  // namespace ferry::torchrec
