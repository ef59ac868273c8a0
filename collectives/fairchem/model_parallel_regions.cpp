#include <ferry/collectives/fairchem/fairchem.h>

#include <ferry/autograd/function.h>
#include <ferry/autograd/tensor_math.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/differentiable/differentiable.h>
#include <ferry/collectives/differentiable/checks.h>
#include <ferry/collectives/engine/validator.h>
#include <ferry/collectives/fairchem/internal.h>
#include <ferry/runtime/error.h>

#include <numeric>
#include <sstream>
#include <string>
#include <vector>

namespace ferry::fairchem {

namespace {

int64_t total_of(const std::vector<int64_t>& sizes) {
  return std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
}

int64_t start_of(const std::vector<int64_t>& sizes, int part) {
  return std::accumulate(sizes.begin(), sizes.begin() + part, int64_t{0});
}

std::string list_str(const std::vector<int64_t>& v) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << ']';
  return os.str();
}

Shape with_size(Shape shape, int64_t dim, int64_t size) {
  shape[static_cast<size_t>(dim)] = size;
  return shape;
}

// Elements of one unit along `dim` (the product of every other dim).
int64_t unit_numel(const Shape& shape, int64_t dim) {
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i)
    if (static_cast<int64_t>(i) != dim) n *= shape[i];
  return n;
}

// Concatenation along `dim`, in rank order, of every rank's `t`, rank k contributing sizes[k]
// entries (known on every rank; every other dim equal on every rank). Nothing travels when the
// result is empty, which every rank knows, so nobody waits on a zero-byte exchange.
Tensor gather_along(const Tensor& t, int64_t dim, const std::vector<int64_t>& sizes,
                    const Group& group) {
  const int64_t total = total_of(sizes);
  const Shape out_shape = with_size(t.shape(), dim, total);
  if (shape_numel(out_shape) == 0) return empty(out_shape, t.dtype());
  if (dim == 0) {
    Tensor y = empty(out_shape, t.dtype());
    all_gather_v(t, y, sizes, group).wait();
    return y;
  }
  // Along another dim a rank's block is not contiguous in the result: gather the flattened
  // tensors (exactly the elements that exist, no padding on the wire), then reassemble.
  const int64_t unit = unit_numel(t.shape(), dim);
  std::vector<int64_t> counts;
  for (int64_t s : sizes) counts.push_back(s * unit);
  Tensor flat = empty({total * unit}, t.dtype());
  all_gather_v(t.flatten(), flat, counts, group).wait();
  std::vector<Tensor> blocks;
  int64_t offset = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    blocks.push_back(flat.narrow(0, offset, counts[k]).reshape(with_size(t.shape(), dim,
                                                                         sizes[k])));
    offset += counts[k];
  }
  return cat(blocks, dim);
}

// The per-rank sizes of x along dim, exchanged (one all_gather of two int64 per rank), with
// the other dims checked equal on every rank. Every rank sees the same exchanged values, so
// every rank raises the same error, before the data moves.
std::vector<int64_t> exchange_sizes(const Tensor& x, int64_t dim, const Group& group,
                                    const char* op) {
  const int w = group.size();
  Tensor mine = from_vector<int64_t>({x.size(dim), detail::shape_fingerprint(x.shape(), dim)});
  Tensor all = empty({2 * static_cast<int64_t>(w)}, DType::Int64);
  all_gather(mine, all, group).wait();
  const int64_t* v = all.data<int64_t>();
  std::vector<int64_t> sizes(static_cast<size_t>(w));
  for (int k = 0; k < w; ++k) {
    sizes[static_cast<size_t>(k)] = v[2 * k];
    FERRY_CHECK(v[2 * k + 1] == v[1], InvalidArgument, detail::where(op, group),
                ": ranks 0 and ", k, " disagree about the dims other than dim ", dim,
                " (this rank's shape is ", shape_str(x.shape()), ")");
  }
  return sizes;
}

// exchange_sizes, and the sizes must be the canonical partition of their total (what
// scatter_to produces), since the backward cuts the gradient that way.
std::vector<int64_t> exchange_canonical_sizes(const Tensor& x, int64_t dim, const Group& group,
                                              const char* op) {
  const std::vector<int64_t> sizes = exchange_sizes(x, dim, group, op);
  const std::vector<int64_t> canonical = canonical_partition(total_of(sizes), group.size());
  FERRY_CHECK(sizes == canonical, InvalidArgument, detail::where(op, group),
              ": the per-rank sizes along dim ", dim, " are ", list_str(sizes),
              ", expected the canonical partition ", list_str(canonical), " of their total ",
              total_of(sizes), " over ", group.size(), " ranks (what "
              "scatter_to_model_parallel_region produces); the backward's slices would not "
              "match the inputs");
  return sizes;
}

class ScatterToRegion final : public Function {
 public:
  ScatterToRegion(Group group, int64_t dim) : group_(std::move(group)), dim_(dim) {}
  std::string name() const override { return "scatter_to_model_parallel_region"; }
  bool is_collective() const override { return true; }

  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override {
    const int me = group_.rank();
    sizes_ = canonical_partition(in[0].size(dim_), group_.size());
    return {in[0].narrow_copy(dim_, start_of(sizes_, me), sizes_[static_cast<size_t>(me)])};
  }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) override {
    return {gather_along(g[0], dim_, sizes_, group_)};
  }

 private:
  Group group_;
  int64_t dim_;
  std::vector<int64_t> sizes_;
};

class GatherFromRegion final : public Function {
 public:
  GatherFromRegion(Group group, int64_t dim, bool sum_grad)
      : group_(std::move(group)), dim_(dim), sum_grad_(sum_grad) {}
  std::string name() const override {
    return sum_grad_ ? "gather_from_model_parallel_region_sum_grad"
                     : "gather_from_model_parallel_region";
  }
  bool is_collective() const override { return true; }

  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override {
    sizes_ = exchange_canonical_sizes(in[0], dim_, group_, name().c_str());
    return {gather_along(in[0], dim_, sizes_, group_)};
  }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) override {
    const int me = group_.rank();
    const int64_t mine = sizes_[static_cast<size_t>(me)];
    const int64_t start = start_of(sizes_, me);
    // Convention R: my slice of my own gradient, no communication.
    if (!sum_grad_) return {g[0].narrow_copy(dim_, start, mine)};
    // Convention P: sum over ranks of every rank's gradient, my slice: a reduce_scatter_v.
    Tensor dx = empty(with_size(g[0].shape(), dim_, mine), g[0].dtype());
    if (g[0].numel() == 0) return {dx};  // empty everywhere (the ranks agree on the shape)
    if (dim_ == 0) {
      reduce_scatter_v(g[0], dx, sizes_, group_).wait();
      return {dx};
    }
    // Another dim: lay the slices out rank after rank (flattened) so that rank k's slice is
    // block k of a 1-D reduce_scatter_v.
    const int64_t unit = unit_numel(g[0].shape(), dim_);
    std::vector<Tensor> slices;
    std::vector<int64_t> counts;
    for (size_t k = 0; k < sizes_.size(); ++k) {
      slices.push_back(g[0].narrow_copy(dim_, start_of(sizes_, static_cast<int>(k)), sizes_[k])
                           .flatten());
      counts.push_back(sizes_[k] * unit);
    }
    reduce_scatter_v(cat(slices, 0), dx.flatten(), counts, group_).wait();
    return {dx};
  }

 private:
  Group group_;
  int64_t dim_;
  bool sum_grad_;
  std::vector<int64_t> sizes_;
};

class ScaleBackwardGrad final : public Function {
 public:
  explicit ScaleBackwardGrad(int scale) : scale_(scale) {}
  std::string name() const override { return "scale_backward_grad"; }

  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override {
    return {in[0]};
  }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) override {
    return {kernels::mul(g[0], static_cast<double>(scale_))};
  }

 private:
  int scale_;
};

int64_t checked_dim(const Variable& x, const Group& gp, int64_t dim, const char* op) {
  detail::check_differentiable_input(x, gp, op);
  return normalize_partition_dim(op, dim, x.shape(), gp.rank());
}

}  // namespace

Tensor gather_with_padding(const Tensor& x, const Group& group, int64_t dim) {
  detail::check_group(group, "gather_with_padding");
  FERRY_CHECK(x.defined(), InvalidArgument, "gather_with_padding on rank ", group.rank(),
              ": the input is an undefined tensor");
  dim = normalize_partition_dim("gather_with_padding", dim, x.shape(), group.rank());
  return gather_along(x, dim, exchange_sizes(x, dim, group, "gather_with_padding"), group);
}

Variable copy_to_model_parallel_region(const Variable& x, const Group& gp) {
  detail::check_differentiable_input(x, gp, "copy_to_model_parallel_region");
  return replicate(x, gp);
}

Variable reduce_from_model_parallel_region(const Variable& x, const Group& gp) {
  detail::check_differentiable_input(x, gp, "reduce_from_model_parallel_region");
  return all_reduce(x, gp, ReduceOp::Sum, Adjoint::Replicated);
}

Variable scatter_to_model_parallel_region(const Variable& x, const Group& gp, int64_t dim) {
  dim = checked_dim(x, gp, dim, "scatter_to_model_parallel_region");
  return apply(std::make_shared<ScatterToRegion>(gp, dim), {x})[0];
}

Variable gather_from_model_parallel_region(const Variable& x, const Group& gp, int64_t dim) {
  dim = checked_dim(x, gp, dim, "gather_from_model_parallel_region");
  return apply(std::make_shared<GatherFromRegion>(gp, dim, /*sum_grad=*/false), {x})[0];
}

Variable gather_from_model_parallel_region_sum_grad(const Variable& x, const Group& gp,
                                                    int64_t dim) {
  dim = checked_dim(x, gp, dim, "gather_from_model_parallel_region_sum_grad");
  return apply(std::make_shared<GatherFromRegion>(gp, dim, /*sum_grad=*/true), {x})[0];
}

Variable scale_backward_grad(const Variable& x, const Group& gp) {
  detail::check_differentiable_input(x, gp, "scale_backward_grad");
  return apply(std::make_shared<ScaleBackwardGrad>(gp.size()), {x})[0];
}

Variable copy_to_model_parallel_region(const Variable& x, const GraphParallel& gp) {
  return copy_to_model_parallel_region(x, gp.gp_group());
}

Variable reduce_from_model_parallel_region(const Variable& x, const GraphParallel& gp) {
  return reduce_from_model_parallel_region(x, gp.gp_group());
}

Variable scatter_to_model_parallel_region(const Variable& x, const GraphParallel& gp,
                                          int64_t dim) {
  return scatter_to_model_parallel_region(x, gp.gp_group(), dim);
}

Variable gather_from_model_parallel_region(const Variable& x, const GraphParallel& gp,
                                           int64_t dim) {
  return gather_from_model_parallel_region(x, gp.gp_group(), dim);
}

Variable gather_from_model_parallel_region_sum_grad(const Variable& x, const GraphParallel& gp,
                                                    int64_t dim) {
  return gather_from_model_parallel_region_sum_grad(x, gp.gp_group(), dim);
}

Variable scale_backward_grad(const Variable& x, const GraphParallel& gp) {
  return scale_backward_grad(x, gp.gp_group());
}

}  // namespace ferry::fairchem
