#include <ferry/collectives/differentiable/differentiable.h>

#include <ferry/autograd/function.h>
#include <ferry/autograd/tensor_math.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/differentiable/checks.h>
#include <ferry/runtime/error.h>

#include <numeric>

namespace ferry {

namespace {

// Row blocks of `t` along dim 0 (views), cut at `rows`.
std::vector<Tensor> row_blocks(const Tensor& t, const std::vector<int64_t>& rows) {
  std::vector<Tensor> blocks;
  blocks.reserve(rows.size());
  int64_t start = 0;
  for (int64_t n : rows) {
    blocks.push_back(t.narrow(0, start, n));
    start += n;
  }
  return blocks;
}

int64_t rows_before(const std::vector<int64_t>& rows, int rank) {
  return std::accumulate(rows.begin(), rows.begin() + rank, int64_t{0});
}

// `rows` rows for every rank of `group` (the blocks of scatter and gather).
std::vector<int64_t> equal_rows(const Group& group, int64_t rows) {
  return std::vector<int64_t>(static_cast<size_t>(group.size()), rows);
}

// ---- replicate ----

class Replicate final : public Function {
 public:
  explicit Replicate(Group group) : group_(std::move(group)) {}
  std::string name() const override { return "replicate"; }
  bool is_collective() const override { return true; }

  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override { return {in[0]}; }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) override {
    Tensor dx = empty(g[0].shape(), g[0].dtype());
    ferry::all_reduce(g[0], dx, group_).wait();
    return {dx};
  }

 private:
  Group group_;
};

// ---- all_reduce ----

// 1 where this rank is the lowest group rank holding the reduced value y, else 0, in x's
// dtype: one all_reduce(min) of "my rank where x == y, else W" (int32).
template <class T>
Tensor winner_mask_of(const Tensor& x, const Tensor& y, const Group& group) {
  const int32_t me = group.rank();
  const int32_t nobody = group.size();
  const int64_t n = x.numel();
  const T* xs = x.data<T>();
  const T* ys = y.data<T>();
  Tensor claim = empty(x.shape(), DType::Int32);
  int32_t* c = claim.data<int32_t>();
  for (int64_t i = 0; i < n; ++i) c[i] = xs[i] == ys[i] ? me : nobody;  // NaN: no claim
  ferry::all_reduce(claim, group, ReduceOp::Min).wait();
  Tensor mask = empty(x.shape(), x.dtype());
  T* m = mask.data<T>();
  for (int64_t i = 0; i < n; ++i) m[i] = c[i] == me ? T(1) : T(0);
  return mask;
}

Tensor winner_mask(const Tensor& x, const Tensor& y, const Group& group) {
  return x.dtype() == DType::Float32 ? winner_mask_of<float>(x, y, group)
                                     : winner_mask_of<double>(x, y, group);
}

class AllReduce final : public Function {
 public:
  AllReduce(Group group, ReduceOp op, Adjoint adjoint)
      : group_(std::move(group)), op_(op), adjoint_(adjoint) {}
  std::string name() const override { return "all_reduce"; }
  // R's backward does not communicate (the winner mask was found in forward).
  bool is_collective() const override { return adjoint_ == Adjoint::PerRank; }

  std::vector<Tensor> forward(Context& ctx, const std::vector<Tensor>& in) override {
    Tensor y = empty(in[0].shape(), in[0].dtype());
    ferry::all_reduce(in[0], y, group_, op_).wait();
    if (extreme() && ctx.needs_input_grad(0)) {
      ctx.save_for_backward({winner_mask(in[0], y, group_)});
    }
    return {y};
  }

  std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& g) override {
    // The sum over ranks of the gradients under P; this rank's own gradient under R.
    Tensor total = g[0];
    if (adjoint_ == Adjoint::PerRank) {
      total = empty(g[0].shape(), g[0].dtype());
      ferry::all_reduce(g[0], total, group_, op_ == ReduceOp::Avg ? ReduceOp::Avg : ReduceOp::Sum)
          .wait();
    } else if (op_ == ReduceOp::Avg) {
      total = kernels::div(g[0], static_cast<double>(group_.size()));
    }
    if (extreme()) return {kernels::mul(total, ctx.saved()[0])};
    return {total};
  }

 private:
  bool extreme() const { return op_ == ReduceOp::Max || op_ == ReduceOp::Min; }
  Group group_;
  ReduceOp op_;
  Adjoint adjoint_;
};

// ---- all_gather ----

// This rank's rows of the gathered gradient, rank k having contributed rows[k].
Tensor own_rows_of_gradient(const Tensor& g, const std::vector<int64_t>& rows, int rank) {
  return g.narrow(0, rows_before(rows, rank), rows[rank]);
}

class AllGather final : public Function {
 public:
  AllGather(Group group, Adjoint adjoint) : group_(std::move(group)), adjoint_(adjoint) {}
  std::string name() const override { return "all_gather"; }
  bool is_collective() const override { return adjoint_ == Adjoint::PerRank; }

  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override {
    const int64_t rows = in[0].size(0);
    Tensor y = empty(with_rows(in[0].shape(), rows * group_.size()), in[0].dtype());
    ferry::all_gather(in[0], y, group_).wait();
    return {y};
  }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) override {
    const int64_t rows = g[0].size(0) / group_.size();
    if (adjoint_ == Adjoint::Replicated) {
      return {g[0].narrow(0, group_.rank() * rows, rows)};
    }
    Tensor dx = empty(with_rows(g[0].shape(), rows), g[0].dtype());
    ferry::reduce_scatter(g[0], dx, group_).wait();
    return {dx};
  }

 private:
  Group group_;
  Adjoint adjoint_;
};

class AllGatherV final : public Function {
 public:
  AllGatherV(Group group, Adjoint adjoint) : group_(std::move(group)), adjoint_(adjoint) {}
  std::string name() const override { return "all_gather_v"; }
  bool is_collective() const override { return adjoint_ == Adjoint::PerRank; }

  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override {
    Work work = ferry::all_gather_v(in[0], group_);
    work.wait();
    rows_ = work.output(1).to_vector<int64_t>();
    return {work.output(0)};
  }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) override {
    if (adjoint_ == Adjoint::Replicated) return {own_rows_of_gradient(g[0], rows_, group_.rank())};
    Tensor dx = empty(with_rows(g[0].shape(), rows_[group_.rank()]), g[0].dtype());
    ferry::reduce_scatter_v(g[0], dx, rows_, group_).wait();
    return {dx};
  }

 private:
  Group group_;
  Adjoint adjoint_;
  std::vector<int64_t> rows_;  // every rank's row count, from forward
};

// ---- reduce_scatter ----

class ReduceScatter final : public Function {
 public:
  ReduceScatter(Group group, std::vector<int64_t> sizes)
      : group_(std::move(group)), sizes_(std::move(sizes)) {}
  std::string name() const override { return sizes_.empty() ? "reduce_scatter" : "reduce_scatter_v"; }
  bool is_collective() const override { return true; }

  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override {
    if (sizes_.empty()) {
      const int64_t rows = in[0].size(0) / group_.size();
      Tensor y = empty(with_rows(in[0].shape(), rows), in[0].dtype());
      ferry::reduce_scatter(in[0], y, group_).wait();
      return {y};
    }
    Tensor y = empty(with_rows(in[0].shape(), sizes_[group_.rank()]), in[0].dtype());
    ferry::reduce_scatter_v(in[0], y, sizes_, group_).wait();
    return {y};
  }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) override {
    if (sizes_.empty()) {
      Tensor dx = empty(with_rows(g[0].shape(), g[0].size(0) * group_.size()),
                        g[0].dtype());
      ferry::all_gather(g[0], dx, group_).wait();
      return {dx};
    }
    const int64_t total = std::accumulate(sizes_.begin(), sizes_.end(), int64_t{0});
    Tensor dx = empty(with_rows(g[0].shape(), total), g[0].dtype());
    ferry::all_gather_v(g[0], dx, sizes_, group_).wait();
    return {dx};
  }

 private:
  Group group_;
  std::vector<int64_t> sizes_;  // empty: equal blocks
};

// ---- all_to_all_single ----

class AllToAllSingle final : public Function {
 public:
  AllToAllSingle(Group group, std::vector<int64_t> output_splits, std::vector<int64_t> input_splits)
      : group_(std::move(group)),
        output_splits_(std::move(output_splits)),
        input_splits_(std::move(input_splits)) {}
  std::string name() const override { return "all_to_all_single"; }
  bool is_collective() const override { return true; }

  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override {
    return {exchange(in[0], output_splits_, input_splits_)};
  }
  // The transpose of a permutation of rows: the same exchange with the splits swapped.
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) override {
    return {exchange(g[0], input_splits_, output_splits_)};
  }

 private:
  Tensor exchange(const Tensor& x, const std::vector<int64_t>& out_splits,
                  const std::vector<int64_t>& in_splits) const {
    if (out_splits.empty()) {
      Tensor y = empty(x.shape(), x.dtype());
      ferry::all_to_all_single(x, y, group_).wait();
      return y;
    }
    const int64_t rows = std::accumulate(out_splits.begin(), out_splits.end(), int64_t{0});
    Tensor y = empty(with_rows(x.shape(), rows), x.dtype());
    ferry::all_to_all_single(x, y, out_splits, in_splits, group_).wait();
    return y;
  }

  Group group_;
  std::vector<int64_t> output_splits_;  // both empty: equal splits
  std::vector<int64_t> input_splits_;
};

// ---- broadcast ----

// The ops with a root (broadcast, scatter, gather).
class RootedCollective : public Function {
 public:
  RootedCollective(Group group, int root) : group_(std::move(group)), root_(root) {}
  bool is_collective() const override { return true; }

 protected:
  bool is_root() const { return group_.rank() == root_; }
  Group group_;
  int root_;
};

class Broadcast final : public RootedCollective {
 public:
  Broadcast(Group group, int root, Adjoint adjoint)
      : RootedCollective(std::move(group), root), adjoint_(adjoint) {}
  std::string name() const override { return "broadcast"; }
  bool is_collective() const override { return adjoint_ == Adjoint::PerRank; }

  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override {
    Tensor y = is_root() ? in[0].clone() : empty(in[0].shape(), in[0].dtype());
    ferry::broadcast(y, root_, group_).wait();
    return {y};
  }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) override {
    if (adjoint_ == Adjoint::Replicated) {
      return {is_root() ? g[0] : zeros(g[0].shape(), g[0].dtype())};
    }
    Tensor dx = is_root() ? empty(g[0].shape(), g[0].dtype()) : Tensor();
    ferry::reduce(g[0], dx, root_, group_).wait();
    return {is_root() ? dx : zeros(g[0].shape(), g[0].dtype())};
  }

 private:
  Adjoint adjoint_;
};

// ---- scatter / gather ----

class Scatter final : public RootedCollective {
 public:
  using RootedCollective::RootedCollective;
  std::string name() const override { return "scatter"; }

  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override {
    if (!is_root()) {
      Tensor y = empty(in[0].shape(), in[0].dtype());
      ferry::scatter({}, y, root_, group_).wait();
      return {y};
    }
    const int64_t rows = in[0].size(0) / group_.size();
    Tensor y = empty(with_rows(in[0].shape(), rows), in[0].dtype());
    ferry::scatter(row_blocks(in[0], equal_rows(group_, rows)), y, root_, group_).wait();
    return {y};
  }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) override {
    if (!is_root()) {
      ferry::gather(g[0], {}, root_, group_).wait();
      return {Tensor()};  // the template input gets no gradient
    }
    const int64_t rows = g[0].size(0);
    Tensor dx = empty(with_rows(g[0].shape(), rows * group_.size()), g[0].dtype());
    ferry::gather(g[0], row_blocks(dx, equal_rows(group_, rows)), root_, group_).wait();
    return {dx};
  }
};

class Gather final : public RootedCollective {
 public:
  using RootedCollective::RootedCollective;
  std::string name() const override { return "gather"; }

  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override {
    const int64_t rows = in[0].size(0);
    if (!is_root()) {
      ferry::gather(in[0], {}, root_, group_).wait();
      return {empty(with_rows(in[0].shape(), 0), in[0].dtype())};
    }
    Tensor y = empty(with_rows(in[0].shape(), rows * group_.size()), in[0].dtype());
    ferry::gather(in[0], row_blocks(y, equal_rows(group_, rows)), root_, group_).wait();
    return {y};
  }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) override {
    const int64_t rows = is_root() ? g[0].size(0) / group_.size() : rows_;
    Tensor dx = empty(with_rows(g[0].shape(), rows), g[0].dtype());
    if (!is_root()) {
      ferry::scatter({}, dx, root_, group_).wait();
      return {dx};
    }
    ferry::scatter(row_blocks(g[0], equal_rows(group_, rows)), dx, root_, group_).wait();
    return {dx};
  }

  void remember_rows(int64_t rows) { rows_ = rows; }

 private:
  int64_t rows_ = 0;  // this rank's input rows (the placeholder output has none)
};

void check_root(int root, const Group& group, const char* op) {
  FERRY_CHECK(root >= 0 && root < group.size(), InvalidArgument, op, " on rank ", group.rank(),
              ": root must be a rank of the group (0..", group.size() - 1, "), given ", root);
}

void check_rows_divisible(const Variable& x, const Group& group, const char* op) {
  FERRY_CHECK(x.size(0) % group.size() == 0, InvalidArgument, op, " on rank ", group.rank(),
              ": the input's rows (", x.size(0), ") must be a multiple of the group size (",
              group.size(), "), given shape ", shape_str(x.shape()));
}

}  // namespace

const char* adjoint_name(Adjoint adjoint) {
  return adjoint == Adjoint::PerRank ? "per-rank" : "replicated";
}

Variable replicate(const Variable& x, const Group& group) {
  detail::check_differentiable_input(x, group, "replicate");
  return apply(std::make_shared<Replicate>(group), {x})[0];
}

Variable all_reduce(const Variable& x, const Group& group, ReduceOp op, Adjoint adjoint) {
  detail::check_differentiable_input(x, group, "all_reduce");
  FERRY_CHECK(op != ReduceOp::Prod, InvalidArgument, "all_reduce on rank ", group.rank(),
              ": the differentiable all_reduce takes sum, avg, max or min, given prod");
  return apply(std::make_shared<AllReduce>(group, op, adjoint), {x})[0];
}

Variable all_gather(const Variable& x, const Group& group, Adjoint adjoint) {
  detail::check_differentiable_input(x, group, "all_gather");
  detail::check_has_rows(x, group, "all_gather");
  return apply(std::make_shared<AllGather>(group, adjoint), {x})[0];
}

Variable all_gather_v(const Variable& x, const Group& group, Adjoint adjoint) {
  detail::check_differentiable_input(x, group, "all_gather_v");
  detail::check_has_rows(x, group, "all_gather_v");
  return apply(std::make_shared<AllGatherV>(group, adjoint), {x})[0];
}

Variable reduce_scatter(const Variable& x, const Group& group) {
  detail::check_differentiable_input(x, group, "reduce_scatter");
  detail::check_has_rows(x, group, "reduce_scatter");
  check_rows_divisible(x, group, "reduce_scatter");
  return apply(std::make_shared<ReduceScatter>(group, std::vector<int64_t>{}), {x})[0];
}

Variable reduce_scatter_v(const Variable& x, const std::vector<int64_t>& sizes,
                          const Group& group) {
  detail::check_differentiable_input(x, group, "reduce_scatter_v");
  detail::check_has_rows(x, group, "reduce_scatter_v");
  FERRY_CHECK(sizes.size() == static_cast<size_t>(group.size()), InvalidArgument,
              "reduce_scatter_v on rank ", group.rank(), ": sizes must have one entry per rank (",
              group.size(), "), given ", sizes.size());
  return apply(std::make_shared<ReduceScatter>(group, sizes), {x})[0];
}

Variable all_to_all_single(const Variable& x, const Group& group) {
  detail::check_differentiable_input(x, group, "all_to_all_single");
  detail::check_has_rows(x, group, "all_to_all_single");
  check_rows_divisible(x, group, "all_to_all_single");
  return apply(std::make_shared<AllToAllSingle>(group, std::vector<int64_t>{},
                                                std::vector<int64_t>{}),
               {x})[0];
}

Variable all_to_all_single(const Variable& x, const std::vector<int64_t>& output_split_sizes,
                           const std::vector<int64_t>& input_split_sizes, const Group& group) {
  detail::check_differentiable_input(x, group, "all_to_all_single");
  detail::check_has_rows(x, group, "all_to_all_single");
  const size_t world = static_cast<size_t>(group.size());
  FERRY_CHECK(output_split_sizes.size() == world && input_split_sizes.size() == world,
              InvalidArgument, "all_to_all_single on rank ", group.rank(),
              ": both split lists must have one entry per rank (", world, "), given ",
              output_split_sizes.size(), " output and ", input_split_sizes.size(), " input splits");
  return apply(std::make_shared<AllToAllSingle>(group, output_split_sizes, input_split_sizes),
               {x})[0];
}

Variable broadcast(const Variable& x, int root, const Group& group, Adjoint adjoint) {
  detail::check_differentiable_input(x, group, "broadcast");
  check_root(root, group, "broadcast");
  return apply(std::make_shared<Broadcast>(group, root, adjoint), {x})[0];
}

Variable scatter(const Variable& x, int root, const Group& group) {
  detail::check_differentiable_input(x, group, "scatter");
  check_root(root, group, "scatter");
  detail::check_has_rows(x, group, "scatter");
  if (group.rank() == root) check_rows_divisible(x, group, "scatter");
  return apply(std::make_shared<Scatter>(group, root), {x})[0];
}

Variable gather(const Variable& x, int root, const Group& group) {
  detail::check_differentiable_input(x, group, "gather");
  check_root(root, group, "gather");
  detail::check_has_rows(x, group, "gather");
  auto fn = std::make_shared<Gather>(group, root);
  fn->remember_rows(x.size(0));
  return apply(fn, {x})[0];
}

}  // namespace ferry
