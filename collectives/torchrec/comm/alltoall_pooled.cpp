// alltoall_pooled and variable_batch_alltoall_pooled (torchrec comm_ops): the pooled-embedding
// all-to-alls of data-parallel -> model-parallel sharding.
#include <ferry/collectives/torchrec/comm/alltoall_op.h>
#include <ferry/collectives/torchrec/comm/alltoall_pooled_in_order.h>
#include <ferry/collectives/torchrec/comm/comm_ops.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/object_pool.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <string>

namespace ferry::torchrec {
namespace {

using detail::AllToAllCommOp;
using detail::list_str;
using detail::PooledColumnOrder;
using detail::sum_of;
using detail::where;

constexpr const char* kPooled = "alltoall_pooled";
constexpr const char* kVariableBatch = "variable_batch_alltoall_pooled";

// Forward: X's rows are already grouped by destination, so the send buffer is X itself; the
// received blocks [B_me, D_i] go side by side. Backward: the gradient's column blocks, each
// flattened ("recat"), are sent back, and what comes back is dX row-major. Without a codec the
// blocks land in their columns directly (placement); the layouts below serve encoding codecs.
// With a column order (alltoall_pooled_in_order.h) the blocks travel as they do with a codec,
// and the layout passes put their columns where the order says (and gather them back).
class AllToAllPooledOp final : public AllToAllCommOp {
 public:
  // What a call of these sizes on this rank shares with the calls of the same sizes before it:
  // a trainer calls with the same sizes at every step, and building the lists anew (the info's
  // copy, the splits, the 2 W + 2 lists of the layouts) cost seven allocations per call.
  struct Shapes {
    All2AllPooledInfo info;
    int rank = -1;
    std::shared_ptr<const Splits> splits;
    std::shared_ptr<const Placement> placement;
  };
  static std::shared_ptr<const Shapes> shapes_for(const All2AllPooledInfo& info, int me);

  AllToAllPooledOp(Group group, const Codecs& codecs, std::shared_ptr<const Shapes> shapes,
                   std::shared_ptr<const PooledColumnOrder> order = nullptr)
      : AllToAllCommOp(kPooled, std::move(group), codecs, detail::Division::kTorchrec,
                       shapes->splits),
        shapes_(std::move(shapes)),
        info_(shapes_->info),
        order_(std::move(order)) {}

 protected:
  Tensor forward_send(const std::vector<Tensor>& inputs) override {
    input_shape_ = inputs[0].shape();
    return inputs[0];
  }
  std::shared_ptr<const Placement> placement(const std::vector<Tensor>& inputs) override {
    input_shape_ = inputs[0].shape();
    return order_ ? nullptr : shapes_->placement;
  }
  std::vector<Tensor> forward_outputs(const Tensor& received) override {
    const int64_t b = info_.batch_size_per_rank[rank()];
    if (order_) return detail::one_tensor(ordered(received, b));
    return detail::one_tensor(columns_side_by_side(received, b));
  }
  Tensor gradient_send(const std::vector<Tensor>& grad_outputs, bool divide) override {
    if (order_) return blocks_from_ordered(grad_outputs[0], divide ? world() : 1);
    return column_blocks(grad_outputs[0], divide ? world() : 1);
  }
  bool divides_in_gradient_send() const override { return true; }
  std::vector<Tensor> input_gradients(const Tensor& received) override {
    return detail::one_tensor(received.reshape(input_shape_));
  }

 private:
  // [b, sum D] from blocks [b, D_i] laid one after the other in `flat`.
  Tensor columns_side_by_side(const Tensor& flat, int64_t b) const {
    Tensor out = empty({b, sum_of(info_.dim_sum_per_rank)}, flat.dtype());
    if (out.dtype() == DType::Float64) {
      move_column_blocks<double>(flat, out, b, /*to_side_by_side=*/true, 1);
    } else {
      move_column_blocks<float>(flat, out, b, /*to_side_by_side=*/true, 1);
    }
    return out;
  }
  // The inverse layout: `g` [b, sum D] cut into column blocks [b, D_i], each row-major, and
  // divided by `divisor` on the way.
  Tensor column_blocks(const Tensor& g, int divisor) const {
    Tensor out = empty({g.numel()}, g.dtype());
    if (out.dtype() == DType::Float64) {
      move_column_blocks<double>(g, out, g.size(0), /*to_side_by_side=*/false, divisor);
    } else {
      move_column_blocks<float>(g, out, g.size(0), /*to_side_by_side=*/false, divisor);
    }
    return out;
  }
  // Copies between the two layouts of b rows of the column blocks D_i: blocked (block i is
  // [b, D_i] row-major, the blocks one after the other) and side by side ([b, sum D], block i
  // in columns off_i..off_i + D_i), dividing each value by `divisor` unless it is 1.
  template <typename T>
  void move_column_blocks(const Tensor& from, Tensor& to, int64_t b, bool to_side_by_side,
                          int divisor) const {
    const int64_t total = sum_of(info_.dim_sum_per_rank);
    const T* src = static_cast<const T*>(from.raw_data());
    T* dst = static_cast<T*>(to.raw_data());
    const detail::GroupSizeDivider<T> by_group_size(divisor);
    int64_t block = 0, col = 0;
    for (int64_t d : info_.dim_sum_per_rank) {
      for (int64_t r = 0; r < b; ++r) {
        const int64_t blocked = block + r * d, side = r * total + col;
        const T* s = src + (to_side_by_side ? blocked : side);
        T* t = dst + (to_side_by_side ? side : blocked);
        if (divisor == 1) {
          std::copy_n(s, d, t);
        } else {
          by_group_size.apply(s, t, d);
        }
      }
      block += b * d;
      col += d;
    }
  }

  // [b, order width] from the blocks [b, D_i] laid one after the other in `flat`: each block's
  // runs of columns where the order puts them.
  Tensor ordered(const Tensor& flat, int64_t b) const {
    Tensor out = empty({b, order_->width()}, flat.dtype());
    move_ordered(flat, out, b, /*to_ordered=*/true, 1);
    return out;
  }
  // The inverse: the blocks [b, D_i] gathered from `g` [b, order width], each row-major, one
  // after the other, divided by `divisor` on the way.
  Tensor blocks_from_ordered(const Tensor& g, int divisor) const {
    Tensor out = empty({g.numel()}, g.dtype());
    move_ordered(g, out, g.size(0), /*to_ordered=*/false, divisor);
    return out;
  }
  void move_ordered(const Tensor& from, Tensor& to, int64_t b, bool to_ordered,
                    int divisor) const {
    const size_t es = from.element_size();
    // The usual run is one pooled embedding (16 or 32 floats, or 8): a copy whose length is
    // known at compile time is a few register moves where a call to memcpy per run would cost
    // more than the copy.
    auto run = [&]<size_t kBytes>() {
      switch (from.dtype()) {
        case DType::Float64:
          return move_ordered_as<double, kBytes>(from, to, b, to_ordered, divisor);
        default:
          return move_ordered_as<float, kBytes>(from, to, b, to_ordered, divisor);
      }
    };
    switch (static_cast<size_t>(order_->uniform_width()) * es) {
      case 32: return run.template operator()<32>();
      case 64: return run.template operator()<64>();
      case 128: return run.template operator()<128>();
      default: return run.template operator()<0>();
    }
  }
  template <typename T, size_t kBytes>
  void move_ordered_as(const Tensor& from, Tensor& to, int64_t b, bool to_ordered,
                       int divisor) const {
    const int64_t width = order_->width();
    const T* src = static_cast<const T*>(from.raw_data());
    T* dst = static_cast<T*>(to.raw_data());
    const detail::GroupSizeDivider<T> by_group_size(divisor);
    int64_t block = 0;
    for (size_t i = 0; i < info_.dim_sum_per_rank.size(); ++i) {
      const int64_t d = info_.dim_sum_per_rank[i];
      const std::vector<PooledColumnOrder::Run>& runs = order_->runs(i);
      for (int64_t r = 0; r < b; ++r) {
        const int64_t blocked = block + r * d, side = r * width;
        for (const PooledColumnOrder::Run& run : runs) {
          const T* s = src + (to_ordered ? blocked + run.from : side + run.to);
          T* t = dst + (to_ordered ? side + run.to : blocked + run.from);
          if (divisor != 1) {
            by_group_size.apply(s, t, run.width);
          } else if constexpr (kBytes != 0) {
            std::memcpy(t, s, kBytes);
          } else {
            std::copy_n(s, run.width, t);
          }
        }
      }
      block += b * d;
    }
  }

  std::shared_ptr<const Shapes> shapes_;
  const All2AllPooledInfo& info_;  // shapes_->info
  std::shared_ptr<const PooledColumnOrder> order_;  // null: the blocks side by side
  Shape input_shape_;
};

std::shared_ptr<const AllToAllPooledOp::Shapes> AllToAllPooledOp::shapes_for(
    const All2AllPooledInfo& info, int me) {
  // The shapes of the last four distinct calls on this thread, replaced in turn.
  static thread_local std::array<std::shared_ptr<const Shapes>, 4> kept;
  static thread_local size_t next = 0;
  for (const auto& k : kept) {
    if (k && k->rank == me && k->info.batch_size_per_rank == info.batch_size_per_rank &&
        k->info.dim_sum_per_rank == info.dim_sum_per_rank)
      return k;
  }
  const std::vector<int64_t>& batch = info.batch_size_per_rank;
  const std::vector<int64_t>& dims = info.dim_sum_per_rank;
  auto shapes = std::make_shared<Shapes>();
  shapes->info = info;
  shapes->rank = me;
  Splits splits;
  splits.send.reserve(batch.size());
  splits.recv.reserve(batch.size());
  for (size_t k = 0; k < batch.size(); ++k) {
    splits.send.push_back(batch[k] * dims[static_cast<size_t>(me)]);
    splits.recv.push_back(batch[static_cast<size_t>(me)] * dims[k]);
  }
  // Forward: X's rows, grouped by destination, are sent as they lie; the block from rank i
  // lands in its columns of the output [b, sum D].
  const int64_t b = batch[static_cast<size_t>(me)];
  const int64_t total = sum_of(dims);
  Placement p;
  p.send = contiguous(splits.send);
  p.recv.reserve(dims.size());
  int64_t col = 0;
  for (int64_t d : dims) {
    p.recv.push_back({StridedRun{col, b, d, total}});
    col += d;
  }
  p.output_shape = {b, total};
  shapes->splits = std::make_shared<const Splits>(std::move(splits));
  shapes->placement = std::make_shared<const Placement>(std::move(p));
  kept[next++ % kept.size()] = shapes;
  return shapes;
}

// A flat exchange: no layout on either side.
class VariableBatchAllToAllPooledOp final : public AllToAllCommOp {
 public:
  using AllToAllCommOp::AllToAllCommOp;

 protected:
  Tensor forward_send(const std::vector<Tensor>& inputs) override {
    input_shape_ = inputs[0].shape();
    return inputs[0].flatten();
  }
  std::vector<Tensor> forward_outputs(const Tensor& received) override {
    return detail::one_tensor(received);
  }
  Tensor gradient_send(const std::vector<Tensor>& grad_outputs, bool) override {
    return grad_outputs[0].flatten();
  }
  std::vector<Tensor> input_gradients(const Tensor& received) override {
    return detail::one_tensor(received.reshape(input_shape_));
  }

 private:
  Shape input_shape_;
};

// The checks of alltoall_pooled's arguments, before anything moves.
void check_pooled(const Variable& x, const All2AllPooledInfo& info, const Group& group) {
  detail::check_input(x, group, kPooled);
  const std::vector<int64_t>& batch = info.batch_size_per_rank;
  const std::vector<int64_t>& dims = info.dim_sum_per_rank;
  detail::check_per_rank(batch, "batch_size_per_rank", group, kPooled);
  detail::check_per_rank(dims, "dim_sum_per_rank", group, kPooled);
  const int me = group.rank();
  FERRY_CHECK(x.dim() == 2, InvalidArgument, where(kPooled, group),
              ": the input must be 2-D [sum(batch_size_per_rank), dim_sum_per_rank[me]], given ",
              shape_str(x.shape()));
  FERRY_CHECK(x.size(0) == sum_of(batch), InvalidArgument, where(kPooled, group),
              ": the input has ", x.size(0), " rows but batch_size_per_rank ", list_str(batch),
              " adds up to ", sum_of(batch));
  FERRY_CHECK(x.size(1) == dims[me], InvalidArgument, where(kPooled, group), ": the input has ",
              x.size(1), " columns but dim_sum_per_rank[", me, "] is ", dims[me],
              " (dim_sum_per_rank ", list_str(dims), ")");
}

Awaitable<Variable> run_pooled(const Variable& x, const All2AllPooledInfo& info,
                               const Group& group, const Codecs& codecs,
                               std::shared_ptr<const detail::PooledColumnOrder> order) {
  // The input's list from this thread's spares (emptied again below): one allocation per call
  // fewer.
  ferry::detail::ScopedSpare<std::vector<Variable>> inputs;
  inputs->push_back(x);
  return detail::run_comm_op_single(
      ferry::detail::make_pooled<AllToAllPooledOp>(
          group, codecs, AllToAllPooledOp::shapes_for(info, group.rank()), std::move(order)),
      *inputs);
}

}  // namespace

Awaitable<Variable> alltoall_pooled(const Variable& x, const All2AllPooledInfo& info,
                                    const Group& group, const Codecs& codecs) {
  check_pooled(x, info, group);
  if (group.size() == 1) return NoWait<Variable>(x);
  return run_pooled(x, info, group, codecs, nullptr);
}

namespace detail {

PooledColumnOrder::PooledColumnOrder(const std::vector<int64_t>& dim_sum_per_rank,
                                     const std::vector<int64_t>& dims,
                                     const std::vector<int64_t>& permute)
    : dim_sum_per_rank_(dim_sum_per_rank), runs_(dim_sum_per_rank.size()) {
  constexpr const char* kWhere = "alltoall_pooled_in_order";
  FERRY_CHECK(permute.size() == dims.size(), InvalidArgument, kWhere, ": permute ",
              list_str(permute), " must list each of the ", dims.size(), " blocks once");
  // Each block's source rank and first column in that rank's block, walking the ranks' columns.
  std::vector<size_t> rank_of(dims.size());
  std::vector<int64_t> from(dims.size());
  size_t rank = 0;
  int64_t col = 0;
  for (size_t k = 0; k < dims.size(); ++k) {
    while (rank < dim_sum_per_rank.size() && col == dim_sum_per_rank[rank] && dims[k] > 0) {
      ++rank;
      col = 0;
    }
    FERRY_CHECK(rank < dim_sum_per_rank.size() && dims[k] >= 0 &&
                    col + dims[k] <= dim_sum_per_rank[rank],
                InvalidArgument, kWhere, ": the blocks ", list_str(dims),
                " do not split the ranks' columns dim_sum_per_rank ",
                list_str(dim_sum_per_rank));
    rank_of[k] = rank;
    from[k] = col;
    col += dims[k];
  }
  FERRY_CHECK(sum_of(dims) == sum_of(dim_sum_per_rank), InvalidArgument, kWhere, ": the blocks ",
              list_str(dims), " do not cover the ranks' columns dim_sum_per_rank ",
              list_str(dim_sum_per_rank));
  std::vector<bool> seen(dims.size(), false);
  for (int64_t k : permute) {
    FERRY_CHECK(k >= 0 && k < static_cast<int64_t>(dims.size()) && !seen[static_cast<size_t>(k)],
                InvalidArgument, kWhere, ": permute ", list_str(permute),
                " must list each of the ", dims.size(), " blocks once");
    seen[static_cast<size_t>(k)] = true;
  }
  for (const int64_t k : permute) {
    const auto u = static_cast<size_t>(k);
    if (dims[u] > 0) runs_[rank_of[u]].push_back({from[u], width_, dims[u]});
    width_ += dims[u];
  }
  // Each rank's runs in the order of its block's columns: a row of it is then read (or
  // written) front to back.
  for (std::vector<Run>& r : runs_)
    std::sort(r.begin(), r.end(), [](const Run& a, const Run& b) { return a.from < b.from; });
  bool same = true;
  for (const std::vector<Run>& r : runs_)
    for (const Run& run : r) {
      if (uniform_width_ == 0) uniform_width_ = run.width;
      same = same && run.width == uniform_width_;
    }
  if (!same) uniform_width_ = 0;
}

Awaitable<Variable> alltoall_pooled_in_order(const Variable& x, const All2AllPooledInfo& info,
                                             std::shared_ptr<const PooledColumnOrder> order,
                                             const Group& group, const Codecs& codecs) {
  check_pooled(x, info, group);
  FERRY_CHECK(order != nullptr && order->dim_sum_per_rank() == info.dim_sum_per_rank,
              InvalidArgument, where(kPooled, group),
              ": the column order was made for other dim_sum_per_rank than ",
              list_str(info.dim_sum_per_rank));
  return run_pooled(x, info, group, codecs, std::move(order));
}

}  // namespace detail

Awaitable<Variable> variable_batch_alltoall_pooled(const Variable& x,
                                                   const VariableBatchAll2AllPooledInfo& info,
                                                   const Group& group, const Codecs& codecs) {
  detail::check_input(x, group, kVariableBatch);
  const auto& batches = info.batch_size_per_rank_per_feature;
  const auto& emb_dims = info.emb_dim_per_rank_per_feature;
  const auto& pre_a2a = info.batch_size_per_feature_pre_a2a;
  const int world = group.size(), me = group.rank();
  FERRY_CHECK(batches.size() == static_cast<size_t>(world), InvalidArgument,
              where(kVariableBatch, group), ": batch_size_per_rank_per_feature must have one "
              "list per rank (", world, "), given ", batches.size());
  FERRY_CHECK(emb_dims.size() == static_cast<size_t>(world), InvalidArgument,
              where(kVariableBatch, group), ": emb_dim_per_rank_per_feature must have one list "
              "per rank (", world, "), given ", emb_dims.size());
  size_t features = 0;
  for (int i = 0; i < world; ++i) {
    detail::check_non_negative(emb_dims[i], "emb_dim_per_rank_per_feature", i, group,
                               kVariableBatch);
    detail::check_non_negative(batches[i], "batch_size_per_rank_per_feature", i, group,
                               kVariableBatch);
    FERRY_CHECK(batches[i].size() == emb_dims[me].size(), InvalidArgument,
                where(kVariableBatch, group), ": batch_size_per_rank_per_feature[", i, "] = ",
                list_str(batches[i]), " must have one entry per local feature (",
                emb_dims[me].size(), ", emb_dim_per_rank_per_feature[", me, "] = ",
                list_str(emb_dims[me]), ")");
    features += emb_dims[i].size();
  }
  FERRY_CHECK(pre_a2a.size() == features, InvalidArgument, where(kVariableBatch, group),
              ": batch_size_per_feature_pre_a2a must have one entry per (rank, feature) of "
              "emb_dim_per_rank_per_feature (", features, "), given ", pre_a2a.size(), ": ",
              list_str(pre_a2a));
  detail::check_non_negative(pre_a2a, "batch_size_per_feature_pre_a2a", group, kVariableBatch);
  std::vector<int64_t> send(world, 0), recv(world, 0);
  size_t flat = 0;
  for (int i = 0; i < world; ++i) {
    for (size_t f = 0; f < emb_dims[me].size(); ++f) send[i] += batches[i][f] * emb_dims[me][f];
    for (size_t f = 0; f < emb_dims[i].size(); ++f) recv[i] += pre_a2a[flat++] * emb_dims[i][f];
  }
  FERRY_CHECK(x.numel() == sum_of(send), InvalidArgument, where(kVariableBatch, group),
              ": the input has ", x.numel(), " elements but the input splits ", list_str(send),
              " (sum over features of batch_size_per_rank_per_feature * my dims) add up to ",
              sum_of(send));
  if (world == 1) return NoWait<Variable>(x);
  return detail::run_comm_op_single(
      std::make_shared<VariableBatchAllToAllPooledOp>(kVariableBatch, group, codecs,
                                                      detail::Division::kTorchrec,
                                                      std::move(send), std::move(recv)),
      {x});
}

}  // namespace ferry::torchrec
