#include <ferry/collectives/torchrec/models/dot_interaction.h>
#include <ferry/collectives/torchrec/models/dot_interaction_lanes.h>

#include <ferry/autograd/function.h>
#include <ferry/autograd/ops_detail.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/intra_op.h>
#include <ferry/runtime/object_pool.h>

#include <Eigen/Core>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace ferry::torchrec {

namespace {

using detail::feature_row;
using detail::first_pair;

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

template <class T>
std::vector<const T*>& scratch_pointers(size_t size) {
  thread_local std::vector<const T*> buffer;
  if (buffer.size() < size) buffer.resize(size);
  return buffer;
}

// Rows of the Gram matrix (forward) or of dX (backward) computed together: their accumulators
// are independent, so the adds of kRows rows overlap instead of each waiting for the one before
// it (one row alone is a chain of D dependent adds), and every chunk of xt or X loaded from
// memory serves kRows rows. 4 rows x 16 floats fill 8 of AVX2's 16 registers.
constexpr int64_t kRows = 4;  // the kernels below name its four accumulators a0-a3

// The four accumulators of a pass into four rows of `out` (row r at out + r * stride).
template <class T>
void store_rows(T* out, int64_t stride, const Lanes<T>& a0, const Lanes<T>& a1,
                const Lanes<T>& a2, const Lanes<T>& a3) {
  const Lanes<T>* acc[kRows] = {&a0, &a1, &a2, &a3};
  for (int64_t r = 0; r < kRows; ++r) Eigen::Map<Lanes<T>>{out + r * stride} = *acc[r];
}

// xt[d * np + k] = X_k[d] of sample b for k < n = F + 1 (columns n.. stay as they are: zero).
template <class T>
void transpose_sample(const T* dense, const T* sparse, int64_t b, int64_t F, int64_t D, T* xt,
                      int64_t np) {
  for (int64_t k = 0; k <= F; ++k) {
    const T* x = feature_row(dense, sparse, b, k, F, D);
    for (int64_t d = 0; d < D; ++d) xt[d * np + k] = x[d];
  }
}

template <class T>
void forward_kernel(const T* dense, const T* sparse, T* out, int64_t B, int64_t F, int64_t D) {
  const int64_t n = F + 1, width = D + n * (n - 1) / 2;
  const int64_t np = round_up(n);
  // xt[d * np + k] = X_k[d], zero-padded to np columns: row i of the Gram matrix is then
  // sum_d X_i[d] * xt[d, :], whole registers at a time. gram holds kRows rows of it.
  std::vector<T>& buf = scratch<T>(static_cast<size_t>(D * np + kRows * np + D));
  T* xt = buf.data();
  T* gram = xt + D * np;
  T* zero_row = gram + kRows * np;  // stands in for rows past the last of a block
  std::fill(xt, xt + D * np, T(0));
  std::fill(zero_row, zero_row + D, T(0));
  for (int64_t b = 0; b < B; ++b) {
    transpose_sample(dense, sparse, b, F, D, xt, np);
    T* o = out + b * width;
    std::copy(dense + b * D, dense + (b + 1) * D, o);
    for (int64_t i0 = 0; i0 + 1 < n; i0 += kRows) {
      const T* x[kRows];
      for (int64_t r = 0; r < kRows; ++r)
        x[r] = i0 + r < n ? feature_row(dense, sparse, b, i0 + r, F, D) : zero_row;
      // Columns j > i0 only, from the chunk that holds i0 + 1: each row's sum over d runs in
      // ascending d, as a plain loop's would.
      for (int64_t c = (i0 + 1) / kLanes * kLanes; c < n; c += kLanes) {
        Lanes<T> a0 = Lanes<T>::Zero(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t d = 0; d < D; ++d) {
          const Eigen::Map<const Lanes<T>> col(xt + d * np + c);
          a0 += x[0][d] * col;
          a1 += x[1][d] * col;
          a2 += x[2][d] * col;
          a3 += x[3][d] * col;
        }
        store_rows(gram + c, np, a0, a1, a2, a3);
      }
      for (int64_t i = i0; i < std::min(i0 + kRows, n - 1); ++i) {
        const T* g = gram + (i - i0) * np;
        std::copy(g + i + 1, g + n, o + D + first_pair(i, n));
      }
    }
  }
}

template <class T>
void backward_kernel(const T* dense, const T* sparse, const T* grad, T* d_dense, T* d_sparse,
                     int64_t B, int64_t F, int64_t D) {
  const int64_t n = F + 1, width = D + n * (n - 1) / 2;
  const int64_t dp = round_up(D);
  // Rows are read in whole chunks of kLanes: straight from the inputs when D is a multiple of
  // it, else from zero-padded copies.
  const bool padded = dp != D;
  std::vector<T>& buf = scratch<T>(static_cast<size_t>((padded ? n * dp : 0) + kRows * dp));
  T* rows_out = buf.data();  // kRows rows of dX
  T* x_copy = rows_out + kRows * dp;
  if (padded) std::fill(x_copy, x_copy + n * dp, T(0));
  std::vector<const T*>& x = scratch_pointers<T>(static_cast<size_t>(n));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t k = 0; k < n; ++k) {
      const T* row = feature_row(dense, sparse, b, k, F, D);
      if (padded) {
        std::copy(row, row + D, x_copy + k * dp);
        row = x_copy + k * dp;
      }
      x[static_cast<size_t>(k)] = row;
    }
    // The pairs' gradients of this sample: pair (i, j), i < j, is at pairs[first_pair(i) + j -
    // i - 1]. Row i of dX needs G[i][j] for every j != i: the pair (j, i) for j < i and (i, j)
    // for j > i. For kRows consecutive rows i0.., the pairs (j, i0..) of one j < i0 lie side by
    // side, and so do each row's (i, j > i): no symmetric G is built.
    const T* pairs = grad + b * width + D;
    for (int64_t i0 = 0; i0 < n; i0 += kRows) {
      const int64_t rows = std::min(kRows, n - i0);
      const T* upper[kRows];  // upper[r][j] = G[i0 + r][j] for j > i0 + r
      for (int64_t r = 0; r < kRows; ++r) {
        const int64_t i = std::min(i0 + r, n - 1);
        upper[r] = pairs + first_pair(i, n) - i - 1;
      }
      for (int64_t c = 0; c < dp; c += kLanes) {
        Lanes<T> a0 = Lanes<T>::Zero(), a1 = a0, a2 = a0, a3 = a0;
        // Each row sums j = 0, 1, ... in order and skips its own j == i rather than adding
        // 0 * X_i (an infinite X_i would make that a NaN).
        for (int64_t j = 0; j < i0; ++j) {
          const Eigen::Map<const Lanes<T>> xj(x[static_cast<size_t>(j)] + c);
          const T* gj = pairs + first_pair(j, n) + (i0 - j - 1);  // G[j][i0 + r] = gj[r]
          a0 += gj[0] * xj;
          if (rows > 1) a1 += gj[1] * xj;
          if (rows > 2) a2 += gj[2] * xj;
          if (rows > 3) a3 += gj[3] * xj;
        }
        for (int64_t j = i0; j < i0 + rows; ++j) {  // the block's own rows: G[i][j] either side
          const Eigen::Map<const Lanes<T>> xj(x[static_cast<size_t>(j)] + c);
          auto g = [&](int64_t r) {  // G[i0 + r][j], j != i0 + r
            const int64_t i = i0 + r;
            return j < i ? pairs[first_pair(j, n) + (i - j - 1)] : upper[r][j];
          };
          if (j != i0) a0 += g(0) * xj;
          if (rows > 1 && j != i0 + 1) a1 += g(1) * xj;
          if (rows > 2 && j != i0 + 2) a2 += g(2) * xj;
          if (rows > 3 && j != i0 + 3) a3 += g(3) * xj;
        }
        for (int64_t j = i0 + rows; j < n; ++j) {
          const Eigen::Map<const Lanes<T>> xj(x[static_cast<size_t>(j)] + c);
          a0 += upper[0][j] * xj;
          a1 += upper[1][j] * xj;
          a2 += upper[2][j] * xj;
          a3 += upper[3][j] * xj;
        }
        store_rows(rows_out + c, dp, a0, a1, a2, a3);
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        const T* acc = rows_out + r * dp;
        if (i == 0) {
          const T* pass = grad + b * width;  // the dense output's own columns
          T* dst = d_dense + b * D;
          for (int64_t d = 0; d < D; ++d) dst[d] = pass[d] + acc[d];
        } else {
          std::copy(acc, acc + D, d_sparse + (b * F + (i - 1)) * D);
        }
      }
    }
  }
}

// Samples per block when intra-op threads split the interaction (a multiple of the lane kernels'
// eight; about 30 us of work at DLRM's shape).
constexpr int64_t kSamplesPerChunk = 64;

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
    const int64_t width = out.size(1);
    visit(in[0].dtype(), [&]<class T>() {
      // Samples are independent: with intra-op threads, blocks of them run at once.
      ferry::detail::parallel_for(B, kSamplesPerChunk, [&](int64_t b0, int64_t b1) {
        const T* dense = in[0].data<T>() + b0 * d_;
        const T* sparse = in[1].data<T>() + b0 * f_ * d_;
        T* o = out.data<T>() + b0 * width;
        if constexpr (std::is_same_v<T, float>) {
          if (detail::lanes_fit(d_)) {
            return detail::forward_lanes(dense, sparse, o, b1 - b0, f_, d_);
          }
        }
        forward_kernel<T>(dense, sparse, o, b1 - b0, f_, d_);
      });
    });
    ctx.save_for_backward(in);  // {dense, sparse}: the two inputs, without a new list
    std::vector<Tensor> outs = ferry::detail::tensor_list(1);  // no list allocated per call
    outs[0] = std::move(out);
    return outs;
  }

  std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& grads) override {
    const std::vector<Tensor> saved = ctx.saved();
    const Tensor& dense = saved[0];
    const Tensor& sparse = saved[1];
    Tensor d_dense = empty(dense.shape(), dense.dtype());
    Tensor d_sparse = empty(sparse.shape(), sparse.dtype());
    const int64_t width = grads[0].size(1);
    visit(dense.dtype(), [&]<class T>() {
      ferry::detail::parallel_for(dense.size(0), kSamplesPerChunk, [&](int64_t b0, int64_t b1) {
        const T* x0 = dense.data<T>() + b0 * d_;
        const T* xs = sparse.data<T>() + b0 * f_ * d_;
        const T* g = grads[0].data<T>() + b0 * width;
        T* dx0 = d_dense.data<T>() + b0 * d_;
        T* dxs = d_sparse.data<T>() + b0 * f_ * d_;
        if constexpr (std::is_same_v<T, float>) {
          if (detail::lanes_fit(d_)) {
            return detail::backward_lanes(x0, xs, g, dx0, dxs, b1 - b0, f_, d_);
          }
        }
        backward_kernel<T>(x0, xs, g, dx0, dxs, b1 - b0, f_, d_);
      });
    });
    std::vector<Tensor> out = ferry::detail::tensor_list(2);
    if (ctx.needs_input_grad(0)) out[0] = std::move(d_dense);
    if (ctx.needs_input_grad(1)) out[1] = std::move(d_sparse);
    return out;
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
  // The inputs' list from this thread's spares, emptied again after the call.
  std::vector<Variable> in = ferry::detail::VariableListSpares::take();
  in.push_back(dense_out);
  in.push_back(sparse);
  Variable out = ferry::detail::apply_first(ferry::detail::make_pooled<DotInteraction>(F, D), in);
  in.clear();
  ferry::detail::VariableListSpares::give(std::move(in));
  return out;
}

}  // namespace ferry::torchrec
