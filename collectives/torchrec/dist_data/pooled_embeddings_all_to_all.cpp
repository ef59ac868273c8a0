#include <ferry/collectives/torchrec/dist_data/pooled_embeddings_all_to_all.h>

#include <ferry/autograd/function.h>
#include <ferry/autograd/ops.h>
#include <ferry/autograd/ops_detail.h>
#include <ferry/collectives/torchrec/comm/alltoall_pooled_in_order.h>
#include <ferry/collectives/torchrec/sparse/jagged_kernels.h>
#include <ferry/collectives/torchrec/utils/format.h>
#include <ferry/runtime/error.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ferry::torchrec {

using detail::list_str;

namespace {

// The column-block permutation as one node: one gathering copy forward, the inverse permutation
// of the gradient backward (fbgemm's permute_pooled_embs_auto_grad). A split along dim 1 and a
// cat would copy every block twice each way and make a tensor per block.
class PermutePooledEmbs final : public Function {
 public:
  explicit PermutePooledEmbs(PermutePooledEmbeddingsSplit p) : p_(std::move(p)) {}
  std::string name() const override { return "permute_pooled_embs"; }
  // The lists returned come from the thread's spares: one allocation per call fewer.
  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override {
    std::vector<Tensor> out = ferry::detail::tensor_list(1);
    out[0] = p_(in[0]);
    return out;
  }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& grads) override {
    std::vector<Tensor> out = ferry::detail::tensor_list(1);
    out[0] = p_.inverse(grads[0]);
    return out;
  }
  const PermutePooledEmbeddingsSplit& permutation() const { return p_; }

 private:
  PermutePooledEmbeddingsSplit p_;
};

}  // namespace

EmbeddingsCallback permute_pooled_embs_callback(PermutePooledEmbeddingsSplit permute) {
  bool identity = true;
  for (size_t i = 0; i < permute.permute().size(); ++i)
    identity = identity && permute.permute()[i] == static_cast<int64_t>(i);
  auto fn = std::make_shared<PermutePooledEmbs>(std::move(permute));
  return [fn, identity](Variable y) {
    const std::vector<int64_t>& dims = fn->permutation().dims();
    int64_t total = 0;
    for (int64_t d : dims) total += d;
    FERRY_CHECK(y.value().dim() == 2 && y.value().size(1) == total, InvalidArgument,
                "permute_pooled_embs_callback: the embeddings have shape ",
                list_str(y.value().shape()), ", not [B, ", total, "] (dims ", list_str(dims), ")");
    if (identity) return y;  // blocks already in order: nothing to copy
    // The input's list from this thread's spares, emptied again after the call.
    std::vector<Variable> in = ferry::detail::ThreadSpares<std::vector<Variable>>::take();
    in.push_back(std::move(y));
    Variable out = ferry::detail::apply_first(fn, in);
    in.clear();
    ferry::detail::ThreadSpares<std::vector<Variable>>::give(std::move(in));
    return out;
  };
}

namespace {

PooledEmbeddingsAwaitable with_callbacks(Awaitable<Variable> req,
                                         const std::vector<EmbeddingsCallback>& callbacks) {
  PooledEmbeddingsAwaitable a(std::move(req));
  for (const EmbeddingsCallback& cb : callbacks) a.then(cb);
  return a;
}

}  // namespace

// ---- PooledEmbeddingsAllToAll ----

PooledEmbeddingsAllToAll::PooledEmbeddingsAllToAll(Group group,
                                                   std::vector<int64_t> dim_sum_per_rank,
                                                   std::vector<EmbeddingsCallback> callbacks,
                                                   Codecs codecs)
    : group_(std::move(group)),
      dim_sum_per_rank_(std::move(dim_sum_per_rank)),
      callbacks_(std::move(callbacks)),
      codecs_(std::move(codecs)) {
  constexpr const char* where = "PooledEmbeddingsAllToAll";
  detail::check_group(group_, where);
  FERRY_CHECK(static_cast<int>(dim_sum_per_rank_.size()) == group_.size(), InvalidArgument, where,
              ": dim_sum_per_rank ", list_str(dim_sum_per_rank_), " has ",
              dim_sum_per_rank_.size(), " entries for a group of ", group_.size(), " ranks");
  for (int64_t d : dim_sum_per_rank_)
    FERRY_CHECK(d >= 0, InvalidArgument, where, ": dim_sum_per_rank ",
                list_str(dim_sum_per_rank_), " has a negative entry");
  for (const EmbeddingsCallback& cb : callbacks_)
    FERRY_CHECK(static_cast<bool>(cb), InvalidArgument, where, ": a callback is empty");
}

PooledEmbeddingsAwaitable PooledEmbeddingsAllToAll::forward(
    const Variable& local_embs, const std::optional<std::vector<int64_t>>& batch_size_per_rank) const {
  const int W = group_.size(), me = group_.rank();
  FERRY_CHECK(local_embs.defined() && local_embs.value().dim() == 2, InvalidArgument,
              "PooledEmbeddingsAllToAll.forward on rank ", me,
              ": local_embs must be a 2-D tensor [B_global, dim_sum_per_rank[me]]");
  const int64_t rows = local_embs.value().size(0), cols = local_embs.value().size(1);
  FERRY_CHECK(cols == dim_sum_per_rank_[me], InvalidArgument, "PooledEmbeddingsAllToAll.forward on rank ",
              me, ": local_embs has ", cols, " columns, dim_sum_per_rank[", me, "] is ",
              dim_sum_per_rank_[me]);
  // The sizes in a scratch info of this thread's, refilled by every call (its lists keep their
  // capacity): alltoall_pooled reads it during the call only.
  thread_local All2AllPooledInfo info;
  std::vector<int64_t>& batches = info.batch_size_per_rank;
  if (batch_size_per_rank) {
    batches.assign(batch_size_per_rank->begin(), batch_size_per_rank->end());
  } else {
    FERRY_CHECK(rows % W == 0, InvalidArgument, "PooledEmbeddingsAllToAll.forward on rank ", me,
                ": without batch_size_per_rank every rank must own B_global / W samples, but "
                "B_global = ",
                rows, " is not divisible by W = ", W, " (pass batch_size_per_rank)");
    batches.assign(static_cast<size_t>(W), rows / W);
  }
  // The comm op checks the sizes against the input (naming alltoall_pooled).
  info.dim_sum_per_rank.assign(dim_sum_per_rank_.begin(), dim_sum_per_rank_.end());
  if (!order_) return with_callbacks(alltoall_pooled(local_embs, info, group_, codecs_), callbacks_);
  if (W == 1) {
    PooledEmbeddingsAwaitable a(alltoall_pooled(local_embs, info, group_, codecs_));
    a.then(order_callback_);
    for (const EmbeddingsCallback& cb : callbacks_) a.then(cb);
    return a;
  }
  return with_callbacks(detail::alltoall_pooled_in_order(local_embs, info, order_, group_, codecs_),
                        callbacks_);
}

void PooledEmbeddingsAllToAll::permute_in_exchange(const PermutePooledEmbeddingsSplit& permute) {
  // Made, and so checked against dim_sum_per_rank, whether or not it is kept.
  auto order = std::make_shared<const detail::PooledColumnOrder>(dim_sum_per_rank_,
                                                                 permute.dims(), permute.permute());
  const std::vector<int64_t>& p = permute.permute();
  bool identity = true;
  for (size_t i = 0; i < p.size(); ++i) identity = identity && p[i] == static_cast<int64_t>(i);
  if (identity) {  // already in order: the blocks land in their columns directly, no pass at all
    order_.reset();
    order_callback_ = nullptr;
    return;
  }
  order_ = std::move(order);
  order_callback_ = permute_pooled_embs_callback(permute);
}

// ---- VariableBatchPooledEmbeddingsAllToAll ----

VariableBatchPooledEmbeddingsAllToAll::VariableBatchPooledEmbeddingsAllToAll(
    Group group, std::vector<std::vector<int64_t>> emb_dim_per_rank_per_feature,
    std::vector<EmbeddingsCallback> callbacks, Codecs codecs)
    : group_(std::move(group)),
      emb_dims_(std::move(emb_dim_per_rank_per_feature)),
      callbacks_(std::move(callbacks)),
      codecs_(std::move(codecs)) {
  constexpr const char* where = "VariableBatchPooledEmbeddingsAllToAll";
  detail::check_group(group_, where);
  FERRY_CHECK(static_cast<int>(emb_dims_.size()) == group_.size(), InvalidArgument, where,
              ": emb_dim_per_rank_per_feature has ", emb_dims_.size(),
              " lists for a group of ", group_.size(), " ranks");
  for (const auto& dims : emb_dims_)
    for (int64_t d : dims)
      FERRY_CHECK(d >= 0, InvalidArgument, where, ": emb_dim_per_rank_per_feature has a negative dim ",
                  list_str(dims));
  for (const EmbeddingsCallback& cb : callbacks_)
    FERRY_CHECK(static_cast<bool>(cb), InvalidArgument, where, ": a callback is empty");
}

PooledEmbeddingsAwaitable VariableBatchPooledEmbeddingsAllToAll::forward(
    const Variable& local_embs,
    const std::vector<std::vector<int64_t>>& batch_size_per_rank_per_feature,
    const std::vector<int64_t>& batch_size_per_feature_pre_a2a) const {
  // The comm op checks the list lengths and the input size against them.
  return with_callbacks(
      variable_batch_alltoall_pooled(
          local_embs,
          VariableBatchAll2AllPooledInfo(batch_size_per_rank_per_feature,
                                         batch_size_per_feature_pre_a2a, emb_dims_),
          group_, codecs_),
      callbacks_);
}

}  // namespace ferry::torchrec
