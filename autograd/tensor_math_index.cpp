// Gathers and scatters of rows: index_select / index_add and embedding_bag with its adjoints.
#include <ferry/autograd/tensor_math.h>
#include <ferry/autograd/tensor_math_detail.h>

#include <algorithm>

namespace ferry::kernels {

namespace {

using detail::ArrayRM;

void check_indices_in_range(const char* op, const Tensor& indices, int64_t limit,
                            const char* what) {
  const int64_t* idx = indices.data<int64_t>();
  for (int64_t j = 0; j < indices.numel(); ++j) {
    FERRY_CHECK(idx[j] >= 0 && idx[j] < limit, InvalidArgument, op, ": index ", idx[j],
                " (at position ", j, ") is outside [0, ", limit, ") of ", what);
  }
}

// The bags of embedding_bag: bag b is [begin(b), end(b)) of the indices.
class Bags {
 public:
  Bags(const char* op, const Tensor& indices, const Tensor& offsets) {
    detail::check_index_tensor(op, "indices", indices);
    detail::check_index_tensor(op, "offsets", offsets);
    n_ = indices.numel();
    count_ = offsets.numel();
    offsets_ = offsets.data<int64_t>();
    FERRY_CHECK(count_ > 0 || n_ == 0, InvalidArgument, op, ": offsets is empty (no bags) but ",
                n_, " indices were given");
    if (count_ == 0) return;
    FERRY_CHECK(offsets_[0] == 0, InvalidArgument, op, ": offsets[0] must be 0 but is ",
                offsets_[0]);
    for (int64_t b = 1; b < count_; ++b) {
      FERRY_CHECK(offsets_[b] >= offsets_[b - 1], InvalidArgument, op, ": offsets must not "
                  "decrease but offsets[", b, "] = ", offsets_[b], " < offsets[", b - 1,
                  "] = ", offsets_[b - 1]);
    }
    FERRY_CHECK(offsets_[count_ - 1] <= n_, InvalidArgument, op, ": offsets[", count_ - 1,
                "] = ", offsets_[count_ - 1], " is past the end of the ", n_, " indices");
  }

  int64_t count() const { return count_; }
  int64_t begin(int64_t b) const { return offsets_[b]; }
  int64_t end(int64_t b) const { return b + 1 < count_ ? offsets_[b + 1] : n_; }

 private:
  const int64_t* offsets_ = nullptr;
  int64_t count_ = 0;
  int64_t n_ = 0;
};

void check_per_sample_weights(const char* op, const Tensor& psw, const Tensor& like,
                              EmbeddingBagMode mode, int64_t n) {
  if (!psw.defined()) return;
  FERRY_CHECK(mode == EmbeddingBagMode::Sum, InvalidArgument, op, ": per_sample_weights are "
              "only supported with mode sum but mode is ", embedding_bag_mode_name(mode));
  detail::check_same_float(op, like, psw);
  FERRY_CHECK(psw.shape() == Shape{n}, InvalidArgument, op, ": per_sample_weights must have "
              "shape ", shape_str({n}), " (one per index) but has shape ", shape_str(psw.shape()));
}

// The factor row k of a bag is scaled by in the pooled sum.
template <class T>
T bag_scale(EmbeddingBagMode mode, const T* psw, int64_t k, int64_t bag_size) {
  if (psw != nullptr) return psw[k];
  if (mode == EmbeddingBagMode::Mean) return T(1) / static_cast<T>(bag_size);
  return T(1);
}

}  // namespace

Tensor index_select(const Tensor& a, int64_t dim, const Tensor& indices) {
  check_float("index_select", a);
  detail::check_index_tensor("index_select", "indices", indices);
  dim = detail::normalize_dim("index_select", dim, a.shape());
  const detail::DimSplit s = detail::split_at(a.shape(), dim);
  check_indices_in_range("index_select", indices, s.extent,
                         detail::str("dim ", dim, " of shape ", shape_str(a.shape())).c_str());
  Shape out_shape = a.shape();
  const int64_t n = indices.numel();
  out_shape[static_cast<size_t>(dim)] = n;
  Tensor out = empty(out_shape, a.dtype());
  const int64_t* idx = indices.data<int64_t>();
  detail::visit_float("index_select", a.dtype(), [&]<class T>() {
    const T* src = a.data<T>();
    T* dst = out.data<T>();
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t j = 0; j < n; ++j) {
        std::copy_n(src + (o * s.extent + idx[j]) * s.inner, s.inner,
                    dst + (o * n + j) * s.inner);
      }
    }
  });
  return out;
}

Tensor index_add(const Shape& shape, int64_t dim, const Tensor& indices, const Tensor& src) {
  check_float("index_add", src);
  detail::check_index_tensor("index_add", "indices", indices);
  dim = detail::normalize_dim("index_add", dim, shape);
  const detail::DimSplit s = detail::split_at(shape, dim);
  const int64_t n = indices.numel();
  Shape src_shape = shape;
  src_shape[static_cast<size_t>(dim)] = n;
  FERRY_CHECK(src.shape() == src_shape, InvalidArgument, "index_add: src must have shape ",
              shape_str(src_shape), " (", n, " indices along dim ", dim, " of ",
              shape_str(shape), ") but has shape ", shape_str(src.shape()));
  check_indices_in_range("index_add", indices, s.extent,
                         detail::str("dim ", dim, " of shape ", shape_str(shape)).c_str());
  Tensor out = zeros(shape, src.dtype());
  const int64_t* idx = indices.data<int64_t>();
  detail::visit_float("index_add", src.dtype(), [&]<class T>() {
    auto from = detail::as_rows<T>(src, s.outer * n, s.inner);
    auto to = detail::as_rows<T>(out, s.outer * s.extent, s.inner);
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t j = 0; j < n; ++j) to.row(o * s.extent + idx[j]) += from.row(o * n + j);
    }
  });
  return out;
}

Tensor embedding_bag(const Tensor& weight, const Tensor& indices, const Tensor& offsets,
                     EmbeddingBagMode mode, const Tensor& per_sample_weights) {
  constexpr const char* kOp = "embedding_bag";
  check_float(kOp, weight);
  FERRY_CHECK(weight.dim() == 2, InvalidArgument, kOp, ": weight must be 2-D [V, D] but has "
              "shape ", shape_str(weight.shape()));
  const Bags bags(kOp, indices, offsets);
  check_per_sample_weights(kOp, per_sample_weights, weight, mode, indices.numel());
  check_indices_in_range(kOp, indices, weight.size(0), "the rows of weight [V, D]");
  const int64_t dim = weight.size(1);
  Tensor out = zeros({bags.count(), dim}, weight.dtype());
  const int64_t* idx = indices.data<int64_t>();
  detail::visit_float(kOp, weight.dtype(), [&]<class T>() {
    const T* psw = per_sample_weights.defined() ? per_sample_weights.data<T>() : nullptr;
    auto w = detail::as_rows<T>(weight, weight.size(0), dim);
    auto o = detail::as_rows<T>(out, bags.count(), dim);
    for (int64_t b = 0; b < bags.count(); ++b) {
      const int64_t size = bags.end(b) - bags.begin(b);
      for (int64_t k = bags.begin(b); k < bags.end(b); ++k) {
        o.row(b) += bag_scale(mode, psw, k, size) * w.row(idx[k]);
      }
    }
  });
  return out;
}

Tensor embedding_bag_weight_grad(const Tensor& grad, const Tensor& indices,
                                 const Tensor& offsets, EmbeddingBagMode mode,
                                 const Tensor& per_sample_weights, int64_t num_weights) {
  constexpr const char* kOp = "embedding_bag";
  check_float(kOp, grad);
  const Bags bags(kOp, indices, offsets);
  FERRY_CHECK(grad.dim() == 2 && grad.size(0) == bags.count(), InvalidArgument, kOp,
              ": the gradient must be [", bags.count(), ", D] (one row per bag) but has shape ",
              shape_str(grad.shape()));
  check_per_sample_weights(kOp, per_sample_weights, grad, mode, indices.numel());
  check_indices_in_range(kOp, indices, num_weights, "the rows of weight [V, D]");
  const int64_t dim = grad.size(1);
  Tensor out = zeros({num_weights, dim}, grad.dtype());
  const int64_t* idx = indices.data<int64_t>();
  detail::visit_float(kOp, grad.dtype(), [&]<class T>() {
    const T* psw = per_sample_weights.defined() ? per_sample_weights.data<T>() : nullptr;
    auto g = detail::as_rows<T>(grad, bags.count(), dim);
    auto o = detail::as_rows<T>(out, num_weights, dim);
    for (int64_t b = 0; b < bags.count(); ++b) {
      const int64_t size = bags.end(b) - bags.begin(b);
      for (int64_t k = bags.begin(b); k < bags.end(b); ++k) {
        o.row(idx[k]) += bag_scale(mode, psw, k, size) * g.row(b);
      }
    }
  });
  return out;
}

Tensor embedding_bag_per_sample_weights_grad(const Tensor& grad, const Tensor& weight,
                                             const Tensor& indices, const Tensor& offsets) {
  constexpr const char* kOp = "embedding_bag";
  detail::check_same_float(kOp, grad, weight);
  const Bags bags(kOp, indices, offsets);
  FERRY_CHECK(weight.dim() == 2, InvalidArgument, kOp, ": weight must be 2-D [V, D] but has "
              "shape ", shape_str(weight.shape()));
  const Shape grad_shape{bags.count(), weight.size(1)};
  FERRY_CHECK(grad.shape() == grad_shape, InvalidArgument, kOp, ": the gradient must have "
              "shape ", shape_str(grad_shape), " but has shape ", shape_str(grad.shape()));
  check_indices_in_range(kOp, indices, weight.size(0), "the rows of weight [V, D]");
  Tensor out = empty({indices.numel()}, grad.dtype());
  const int64_t* idx = indices.data<int64_t>();
  detail::visit_float(kOp, grad.dtype(), [&]<class T>() {
    auto g = detail::as_rows<T>(grad, bags.count(), weight.size(1));
    auto w = detail::as_rows<T>(weight, weight.size(0), weight.size(1));
    T* o = out.data<T>();
    for (int64_t b = 0; b < bags.count(); ++b) {
      for (int64_t k = bags.begin(b); k < bags.end(b); ++k) {
        o[k] = (g.row(b) * w.row(idx[k])).sum();
      }
    }
  });
  return out;
}

}  // namespace ferry::kernels
