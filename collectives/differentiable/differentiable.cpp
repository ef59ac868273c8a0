#include <ferry/collectives/differentiable/differentiable.h>

#include <ferry/autograd/grad_mode.h>
#include <ferry/autograd/tensor_math.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/differentiable/checks.h>
#include <ferry/collectives/differentiable/launch_and_wait.h>
#include <ferry/collectives/engine/validator.h>
#include <ferry/runtime/error.h>

#include <numeric>
#include <string>
#include <utility>

namespace ferry {

namespace {

// Each collective below is one Req/Wait op (req_wait.h): the blocking functions at the end
// run it as one node (launch_and_wait.h). An op keeps what its later steps need (the receive
// buffers, the sizes a gather found) and hands its outputs over by moving them out, so that
// once a step returned nothing but the caller holds them (autograd keeps a gradient nobody
// else holds as grad() without copying it).

// The ops whose state is a group and two buffers: the forward's output and the gradient's.
class CollectiveOp : public ReqWaitOp {
 public:
  CollectiveOp(const char* name, Group group) : name_(name), group_(std::move(group)) {}
  std::string name() const override { return name_; }
  std::string describe() const override { return detail::where(name_, group_); }
  std::vector<Tensor> finish() override { return detail::only(std::move(y_)); }
  std::vector<Tensor> finish_gradient() override { return detail::only(std::move(dx_)); }

 protected:
  int rank() const { return group_.rank(); }
  int world() const { return group_.size(); }

  const char* name_;
  Group group_;
  Tensor y_;   // the forward's output, until finish hands it over
  Tensor dx_;  // the input's gradient, until finish_gradient does
};

// ---- replicate ----

class ReplicateOp final : public CollectiveOp {
 public:
  explicit ReplicateOp(Group group) : CollectiveOp("replicate", std::move(group)) {}

  Work launch(const std::vector<Tensor>& in) override {
    y_ = in[0];  // the same values, shared
    return Work();
  }
  Work launch_gradient(const std::vector<Tensor>& g) override {
    dx_ = empty(g[0].shape(), g[0].dtype());
    return ferry::all_reduce(g[0], dx_, group_);
  }
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

class AllReduceOp final : public CollectiveOp {
 public:
  // `find_winners`: max / min with an input that requires grad (the mask costs a collective).
  AllReduceOp(Group group, ReduceOp op, Adjoint adjoint, bool find_winners)
      : CollectiveOp("all_reduce", std::move(group)), op_(op), adjoint_(adjoint),
        find_winners_(find_winners) {}
  // R's backward does not communicate (the winner mask was found in forward).
  bool gradient_communicates() const override { return adjoint_ == Adjoint::PerRank; }

  Work launch(const std::vector<Tensor>& in) override {
    y_ = empty(in[0].shape(), in[0].dtype());
    if (find_winners_) x_ = in[0];
    return ferry::all_reduce(in[0], y_, group_, op_);
  }
  std::vector<Tensor> finish() override {
    if (find_winners_) winners_ = winner_mask(std::exchange(x_, Tensor()), y_, group_);
    return CollectiveOp::finish();
  }
  // The sum over ranks of the gradients under P; this rank's own gradient under R.
  Work launch_gradient(const std::vector<Tensor>& g) override {
    if (adjoint_ == Adjoint::Replicated) {
      dx_ = op_ == ReduceOp::Avg ? kernels::div(g[0], static_cast<double>(world())) : g[0];
      return Work();
    }
    dx_ = empty(g[0].shape(), g[0].dtype());
    return ferry::all_reduce(g[0], dx_, group_,
                             op_ == ReduceOp::Avg ? ReduceOp::Avg : ReduceOp::Sum);
  }
  std::vector<Tensor> finish_gradient() override {
    if (op_ == ReduceOp::Max || op_ == ReduceOp::Min)
      return detail::only(kernels::mul(std::exchange(dx_, Tensor()), winners_));
    return CollectiveOp::finish_gradient();
  }

 private:
  ReduceOp op_;
  Adjoint adjoint_;
  bool find_winners_;
  Tensor x_;        // the input, until finish compares it with the result
  Tensor winners_;  // 1 where this rank takes the gradient (max / min)
};

// ---- all_gather ----

class AllGatherOp final : public CollectiveOp {
 public:
  AllGatherOp(Group group, Adjoint adjoint)
      : CollectiveOp("all_gather", std::move(group)), adjoint_(adjoint) {}
  bool gradient_communicates() const override { return adjoint_ == Adjoint::PerRank; }

  Work launch(const std::vector<Tensor>& in) override {
    y_ = empty(with_rows(in[0].shape(), in[0].size(0) * world()), in[0].dtype());
    return ferry::all_gather(in[0], y_, group_);
  }
  Work launch_gradient(const std::vector<Tensor>& g) override {
    const int64_t rows = g[0].size(0) / world();
    if (adjoint_ == Adjoint::Replicated) {
      dx_ = g[0].narrow(0, rank() * rows, rows);  // my block of my own gradient
      return Work();
    }
    dx_ = empty(with_rows(g[0].shape(), rows), g[0].dtype());
    return ferry::reduce_scatter(g[0], dx_, group_);
  }

 private:
  Adjoint adjoint_;
};

// Uneven: the raw op exchanges the row counts and allocates the output.
class AllGatherVOp final : public CollectiveOp {
 public:
  AllGatherVOp(Group group, Adjoint adjoint)
      : CollectiveOp("all_gather_v", std::move(group)), adjoint_(adjoint) {}
  bool gradient_communicates() const override { return adjoint_ == Adjoint::PerRank; }

  Work launch(const std::vector<Tensor>& in) override {
    gathering_ = ferry::all_gather_v(in[0], group_);
    return gathering_;
  }
  std::vector<Tensor> finish() override {
    Work done = std::exchange(gathering_, Work());
    rows_ = done.output(1).to_vector<int64_t>();
    return detail::only(done.output(0));
  }
  Work launch_gradient(const std::vector<Tensor>& g) override {
    const int64_t before = std::accumulate(rows_.begin(), rows_.begin() + rank(), int64_t{0});
    if (adjoint_ == Adjoint::Replicated) {
      dx_ = g[0].narrow(0, before, rows_[rank()]);  // my rows of my own gradient
      return Work();
    }
    dx_ = empty(with_rows(g[0].shape(), rows_[rank()]), g[0].dtype());
    return ferry::reduce_scatter_v(g[0], dx_, rows_, group_);
  }

 private:
  Adjoint adjoint_;
  Work gathering_;             // the forward's Work, which holds the output it allocated
  std::vector<int64_t> rows_;  // every rank's row count, from forward
};

// ---- reduce_scatter ----

class ReduceScatterOp final : public CollectiveOp {
 public:
  // `sizes` empty: equal blocks.
  ReduceScatterOp(Group group, std::vector<int64_t> sizes)
      : CollectiveOp(sizes.empty() ? "reduce_scatter" : "reduce_scatter_v", std::move(group)),
        sizes_(std::move(sizes)) {}

  Work launch(const std::vector<Tensor>& in) override {
    if (sizes_.empty()) {
      y_ = empty(with_rows(in[0].shape(), in[0].size(0) / world()), in[0].dtype());
      return ferry::reduce_scatter(in[0], y_, group_);
    }
    y_ = empty(with_rows(in[0].shape(), sizes_[rank()]), in[0].dtype());
    return ferry::reduce_scatter_v(in[0], y_, sizes_, group_);
  }
  Work launch_gradient(const std::vector<Tensor>& g) override {
    if (sizes_.empty()) {
      dx_ = empty(with_rows(g[0].shape(), g[0].size(0) * world()), g[0].dtype());
      return ferry::all_gather(g[0], dx_, group_);
    }
    const int64_t total = std::accumulate(sizes_.begin(), sizes_.end(), int64_t{0});
    dx_ = empty(with_rows(g[0].shape(), total), g[0].dtype());
    return ferry::all_gather_v(g[0], dx_, sizes_, group_);
  }

 private:
  std::vector<int64_t> sizes_;
};

// ---- broadcast ----

class BroadcastOp final : public CollectiveOp {
 public:
  BroadcastOp(Group group, int root, Adjoint adjoint)
      : CollectiveOp("broadcast", std::move(group)), root_(root), adjoint_(adjoint) {}
  bool gradient_communicates() const override { return adjoint_ == Adjoint::PerRank; }

  Work launch(const std::vector<Tensor>& in) override {
    y_ = is_root() ? in[0].clone() : empty(in[0].shape(), in[0].dtype());
    return ferry::broadcast(y_, root_, group_);
  }
  // Only the root's input was read: every other rank's gradient is zero.
  Work launch_gradient(const std::vector<Tensor>& g) override {
    if (!is_root()) {
      dx_ = zeros(g[0].shape(), g[0].dtype());
      if (adjoint_ == Adjoint::Replicated) return Work();
      return ferry::reduce(g[0], Tensor(), root_, group_);
    }
    if (adjoint_ == Adjoint::Replicated) {
      dx_ = g[0];
      return Work();
    }
    dx_ = empty(g[0].shape(), g[0].dtype());
    return ferry::reduce(g[0], dx_, root_, group_);
  }

 private:
  bool is_root() const { return rank() == root_; }
  int root_;
  Adjoint adjoint_;
};

// ---- scatter / gather ----

// Row blocks of `t` along dim 0 (views), `rows` rows for every rank of `group`.
std::vector<Tensor> row_blocks(const Tensor& t, const Group& group, int64_t rows) {
  std::vector<Tensor> blocks;
  blocks.reserve(static_cast<size_t>(group.size()));
  for (int k = 0; k < group.size(); ++k) blocks.push_back(t.narrow(0, k * rows, rows));
  return blocks;
}

class ScatterOp final : public CollectiveOp {
 public:
  ScatterOp(Group group, int root) : CollectiveOp("scatter", std::move(group)), root_(root) {}

  Work launch(const std::vector<Tensor>& in) override {
    if (!is_root()) {
      y_ = empty(in[0].shape(), in[0].dtype());  // the template gives the shape
      return ferry::scatter({}, y_, root_, group_);
    }
    const int64_t rows = in[0].size(0) / world();
    y_ = empty(with_rows(in[0].shape(), rows), in[0].dtype());
    return ferry::scatter(row_blocks(in[0], group_, rows), y_, root_, group_);
  }
  Work launch_gradient(const std::vector<Tensor>& g) override {
    if (!is_root()) return ferry::gather(g[0], {}, root_, group_);  // the template gets none
    const int64_t rows = g[0].size(0);
    dx_ = empty(with_rows(g[0].shape(), rows * world()), g[0].dtype());
    return ferry::gather(g[0], row_blocks(dx_, group_, rows), root_, group_);
  }

 private:
  bool is_root() const { return rank() == root_; }
  int root_;
};

class GatherOp final : public CollectiveOp {
 public:
  // `rows`: this rank's input rows (the other ranks' output placeholder has none).
  GatherOp(Group group, int root, int64_t rows)
      : CollectiveOp("gather", std::move(group)), root_(root), rows_(rows) {}

  Work launch(const std::vector<Tensor>& in) override {
    if (!is_root()) {
      y_ = empty(with_rows(in[0].shape(), 0), in[0].dtype());
      return ferry::gather(in[0], {}, root_, group_);
    }
    y_ = empty(with_rows(in[0].shape(), rows_ * world()), in[0].dtype());
    return ferry::gather(in[0], row_blocks(y_, group_, rows_), root_, group_);
  }
  Work launch_gradient(const std::vector<Tensor>& g) override {
    dx_ = empty(with_rows(g[0].shape(), rows_), g[0].dtype());
    if (!is_root()) return ferry::scatter({}, dx_, root_, group_);
    return ferry::scatter(row_blocks(g[0], group_, rows_), dx_, root_, group_);
  }

 private:
  bool is_root() const { return rank() == root_; }
  int root_;
  int64_t rows_;
};

void check_root(int root, const Group& group, const char* op) {
  detail::Validator(op, group).root(root);
}

}  // namespace

const char* adjoint_name(Adjoint adjoint) {
  return adjoint == Adjoint::PerRank ? "per-rank" : "replicated";
}

using detail::launch_and_wait;

Variable replicate(const Variable& x, const Group& group) {
  detail::check_differentiable_input(x, group, "replicate");
  return launch_and_wait<ReplicateOp>({x}, group)[0];
}

Variable all_reduce(const Variable& x, const Group& group, ReduceOp op, Adjoint adjoint) {
  detail::check_differentiable_input(x, group, "all_reduce");
  if (op == ReduceOp::Prod)
    detail::Validator("all_reduce", group)
        .fail("the differentiable all_reduce takes sum, avg, max or min, given prod");
  // Finding which rank takes a max / min's gradient costs a collective: only when one is due.
  const bool find_winners = (op == ReduceOp::Max || op == ReduceOp::Min) && grad_enabled() &&
                            x.requires_grad();
  return launch_and_wait<AllReduceOp>({x}, group, op, adjoint, find_winners)[0];
}

Variable all_gather(const Variable& x, const Group& group, Adjoint adjoint) {
  detail::check_differentiable_input(x, group, "all_gather");
  detail::check_has_rows(x, group, "all_gather");
  return launch_and_wait<AllGatherOp>({x}, group, adjoint)[0];
}

Variable all_gather_v(const Variable& x, const Group& group, Adjoint adjoint) {
  detail::check_differentiable_input(x, group, "all_gather_v");
  detail::check_has_rows(x, group, "all_gather_v");
  return launch_and_wait<AllGatherVOp>({x}, group, adjoint)[0];
}

Variable reduce_scatter(const Variable& x, const Group& group) {
  detail::check_differentiable_input(x, group, "reduce_scatter");
  detail::check_has_rows(x, group, "reduce_scatter");
  detail::check_rows_divisible(x, group, "reduce_scatter");
  return launch_and_wait<ReduceScatterOp>({x}, group, std::vector<int64_t>{})[0];
}

Variable reduce_scatter_v(const Variable& x, const std::vector<int64_t>& sizes,
                          const Group& group) {
  detail::check_differentiable_input(x, group, "reduce_scatter_v");
  detail::check_has_rows(x, group, "reduce_scatter_v");
  if (sizes.size() != static_cast<size_t>(group.size()))
    detail::Validator("reduce_scatter_v", group)
        .fail(detail::str("sizes must have one entry per rank (", group.size(), "), given ",
                          sizes.size()));
  return launch_and_wait<ReduceScatterOp>({x}, group, sizes)[0];
}

Variable broadcast(const Variable& x, int root, const Group& group, Adjoint adjoint) {
  detail::check_differentiable_input(x, group, "broadcast");
  check_root(root, group, "broadcast");
  return launch_and_wait<BroadcastOp>({x}, group, root, adjoint)[0];
}

Variable scatter(const Variable& x, int root, const Group& group) {
  detail::check_differentiable_input(x, group, "scatter");
  check_root(root, group, "scatter");
  detail::check_has_rows(x, group, "scatter");
  if (group.rank() == root) detail::check_rows_divisible(x, group, "scatter");
  return launch_and_wait<ScatterOp>({x}, group, root)[0];
}

Variable gather(const Variable& x, int root, const Group& group) {
  detail::check_differentiable_input(x, group, "gather");
  check_root(root, group, "gather");
  detail::check_has_rows(x, group, "gather");
  return launch_and_wait<GatherOp>({x}, group, root, x.size(0))[0];
}

}  // namespace ferry
