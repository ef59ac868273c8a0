// The reduce-scatter / all-gather family: reduce_scatter_pooled, reduce_scatter_base_pooled,
// reduce_scatter_v_pooled, reduce_scatter_v_per_feature_pooled and all_gather_base_pooled, all on
// ReduceScatterGatherOp.
#include <ferry/collectives/torchrec/comm/comm_ops.h>

#include <ferry/collectives/differentiable/checks.h>
#include <ferry/collectives/torchrec/comm/reduce_scatter_op.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <functional>
#include <string>

namespace ferry::torchrec {
namespace {

using detail::ForwardCollective;
using detail::list_str;
using detail::sum_of;
using detail::where;

constexpr const char* kList = "reduce_scatter_pooled";
constexpr const char* kBase = "reduce_scatter_base_pooled";
constexpr const char* kV = "reduce_scatter_v_pooled";
constexpr const char* kPerFeature = "reduce_scatter_v_per_feature_pooled";
constexpr const char* kAllGather = "all_gather_base_pooled";

// Elements of one row along dim 0 of `shape` (1 for a 1-D shape).
int64_t row_elements(const Shape& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

void check_shape(const Variable& x, const Shape& expected, const char* what, const char* op,
                 const Group& group) {
  FERRY_CHECK(x.shape() == expected, InvalidArgument, where(op, group), ": ", what, " says ",
              shape_str(expected), ", the input is ", shape_str(x.shape()));
}

Awaitable<Variable> run(const char* op, const Group& group, const Codecs& codecs,
                        ForwardCollective forward, std::vector<int64_t> sizes, Shape output,
                        const std::vector<Variable>& inputs) {
  detail::check_reducible_codec(codecs, forward == ForwardCollective::kReduceScatter,
                                inputs[0].dtype(), group, op);
  return detail::run_comm_op_single(
      ferry::detail::make_pooled<detail::ReduceScatterGatherOp>(op, group, codecs, forward,
                                                                std::move(sizes),
                                                                std::move(output)),
      inputs);
}

// The same for the one input `x`, in a list of this thread's (none allocated).
Awaitable<Variable> run(const char* op, const Group& group, const Codecs& codecs,
                        ForwardCollective forward, std::vector<int64_t> sizes, Shape output,
                        const Variable& x) {
  ferry::detail::ScopedSpare<std::vector<Variable>> inputs;
  inputs->push_back(x);
  return run(op, group, codecs, forward, std::move(sizes), std::move(output), *inputs);
}

// input_splits: one row count per rank, adding up to x's rows.
void check_splits(const char* op, const Variable& x, const std::vector<int64_t>& splits,
                  const Group& group) {
  detail::check_per_rank(splits, "input_splits", group, op);
  FERRY_CHECK(x.dim() >= 1 && x.size(0) == sum_of(splits), InvalidArgument, where(op, group),
              ": input_splits ", list_str(splits), " add up to ", sum_of(splits),
              " rows, the input is ", shape_str(x.shape()));
}

// reduce_scatter_v_pooled once its splits are known to fit the input.
Awaitable<Variable> reduce_scatter_v(const char* op, const Variable& x,
                                     const std::vector<int64_t>& splits, const Group& group,
                                     const Codecs& codecs) {
  if (group.size() == 1) return NoWait<Variable>(x);
  std::vector<int64_t> sizes;
  sizes.reserve(splits.size());
  for (int64_t s : splits) sizes.push_back(s * row_elements(x.shape()));
  return run(op, group, codecs, ForwardCollective::kReduceScatter, std::move(sizes),
             with_rows(x.shape(), splits[group.rank()]), x);
}

// The info's other fields must describe the same split of the input.
void check_v_info(const char* op, const Variable& x, const ReduceScatterVInfo& info,
                  const Group& group) {
  const std::vector<int64_t>& splits = info.input_splits;
  check_shape(x, info.total_input_size, "total_input_size", op, group);
  FERRY_CHECK(info.input_sizes.size() == splits.size(), InvalidArgument, where(op, group),
              ": input_sizes must have one shape per rank (", splits.size(), "), given ",
              info.input_sizes.size());
  for (size_t j = 0; j < splits.size(); ++j) {
    FERRY_CHECK(info.input_sizes[j] == with_rows(x.shape(), splits[j]), InvalidArgument,
                where(op, group), ": input_sizes[", j, "] is ", shape_str(info.input_sizes[j]),
                ", block ", j, " of the input is ", shape_str(with_rows(x.shape(), splits[j])));
  }
  const bool equal =
      std::adjacent_find(splits.begin(), splits.end(), std::not_equal_to<>()) == splits.end();
  FERRY_CHECK(info.equal_splits == equal, InvalidArgument, where(op, group), ": equal_splits is ",
              info.equal_splits ? "true" : "false", " but input_splits ", list_str(splits),
              equal ? " are all equal" : " differ");
}

// reduce_scatter_pooled with its info (`info`), or without one (null): the info the short form
// stands for holds the inputs' own shapes, so only a given one is checked against them.
Awaitable<Variable> reduce_scatter_list(const std::vector<Variable>& inputs,
                                        const ReduceScatterInfo* info, const Group& group,
                                        const Codecs& codecs) {
  ferry::detail::check_group(group, kList);
  FERRY_CHECK(inputs.size() == static_cast<size_t>(group.size()), InvalidArgument,
              where(kList, group), ": needs one input per rank (", group.size(), "), given ",
              inputs.size());
  FERRY_CHECK(!info || info->input_sizes.size() == inputs.size(), InvalidArgument,
              where(kList, group), ": input_sizes must have one shape per input (",
              inputs.size(), "), given ", info->input_sizes.size());
  std::vector<int64_t> sizes = detail::SizeListSpares::take();  // the op gives it back
  sizes.clear();
  for (size_t j = 0; j < inputs.size(); ++j) {
    detail::check_input(inputs[j], group, kList);
    FERRY_CHECK(inputs[j].dtype() == inputs[0].dtype(), InvalidArgument, where(kList, group),
                ": inputs[", j, "] is ", dtype_name(inputs[j].dtype()), ", inputs[0] ",
                dtype_name(inputs[0].dtype()));
    if (info) check_shape(inputs[j], info->input_sizes[j], "input_sizes[j]", kList, group);
    sizes.push_back(inputs[j].numel());
  }
  const int me = group.rank();
  if (group.size() == 1) return NoWait<Variable>(inputs[me]);
  return run(kList, group, codecs, ForwardCollective::kReduceScatter, std::move(sizes),
             inputs[me].shape(), inputs);
}

}  // namespace

Awaitable<Variable> reduce_scatter_pooled(const std::vector<Variable>& inputs,
                                          const ReduceScatterInfo& info, const Group& group,
                                          const Codecs& codecs) {
  return reduce_scatter_list(inputs, &info, group, codecs);
}

Awaitable<Variable> reduce_scatter_pooled(const std::vector<Variable>& inputs,
                                          const Group& group, const Codecs& codecs) {
  return reduce_scatter_list(inputs, nullptr, group, codecs);
}

Awaitable<Variable> reduce_scatter_base_pooled(const Variable& x,
                                               const ReduceScatterBaseInfo& info,
                                               const Group& group, const Codecs& codecs) {
  detail::check_input(x, group, kBase);
  check_shape(x, info.input_sizes, "input_sizes", kBase, group);
  ferry::detail::check_rows_divisible(x, group, kBase);
  const int world = group.size();
  if (world == 1) return NoWait<Variable>(x);
  const int64_t rows = x.size(0) / world;
  return run(kBase, group, codecs, ForwardCollective::kReduceScatter,
             std::vector<int64_t>(world, rows * row_elements(x.shape())),
             with_rows(x.shape(), rows), x);
}

Awaitable<Variable> reduce_scatter_base_pooled(const Variable& x, const Group& group,
                                               const Codecs& codecs) {
  detail::check_input(x, group, kBase);
  return reduce_scatter_base_pooled(x, ReduceScatterBaseInfo{x.shape()}, group, codecs);
}

Awaitable<Variable> reduce_scatter_v_pooled(const Variable& x, const ReduceScatterVInfo& info,
                                            const Group& group, const Codecs& codecs) {
  detail::check_input(x, group, kV);
  check_splits(kV, x, info.input_splits, group);
  check_v_info(kV, x, info, group);
  return reduce_scatter_v(kV, x, info.input_splits, group, codecs);
}

// The info this form stands for (the input cut into input_splits) describes the input by
// construction: only its splits need checking.
Awaitable<Variable> reduce_scatter_v_pooled(const Variable& x,
                                            const std::vector<int64_t>& input_splits,
                                            const Group& group, const Codecs& codecs) {
  detail::check_input(x, group, kV);
  check_splits(kV, x, input_splits, group);
  return reduce_scatter_v(kV, x, input_splits, group, codecs);
}

Awaitable<Variable> reduce_scatter_v_per_feature_pooled(
    const Variable& x, const std::vector<std::vector<int64_t>>& batch_size_per_rank_per_feature,
    const std::vector<int64_t>& embedding_dims, const Group& group, const Codecs& codecs) {
  detail::check_input(x, group, kPerFeature);
  const auto& batches = batch_size_per_rank_per_feature;
  FERRY_CHECK(batches.size() == static_cast<size_t>(group.size()), InvalidArgument,
              where(kPerFeature, group), ": batch_size_per_rank_per_feature must have one list "
              "per rank (", group.size(), "), given ", batches.size());
  detail::check_non_negative(embedding_dims, "embedding_dims", group, kPerFeature);
  std::vector<int64_t> splits;
  for (size_t r = 0; r < batches.size(); ++r) {
    FERRY_CHECK(batches[r].size() == embedding_dims.size(), InvalidArgument,
                where(kPerFeature, group), ": batch_size_per_rank_per_feature[", r, "] = ",
                list_str(batches[r]), " must have one entry per feature of embedding_dims ",
                list_str(embedding_dims));
    detail::check_non_negative(batches[r], "batch_size_per_rank_per_feature", r, group,
                               kPerFeature);
    int64_t s = 0;
    for (size_t f = 0; f < embedding_dims.size(); ++f) s += batches[r][f] * embedding_dims[f];
    splits.push_back(s);
  }
  FERRY_CHECK(x.numel() == sum_of(splits), InvalidArgument, where(kPerFeature, group),
              ": the input has ", x.numel(), " elements, the per-rank splits ", list_str(splits),
              " add up to ", sum_of(splits));
  // As the original: a reduce-scatter-v of the flat buffer; the gradient takes x's shape back.
  if (group.size() == 1) return NoWait<Variable>(x);
  return run(kPerFeature, group, codecs, ForwardCollective::kReduceScatter, splits,
             Shape{splits[group.rank()]}, x);
}

Awaitable<Variable> all_gather_base_pooled(const Variable& x, const AllGatherBaseInfo& info,
                                           const Group& group, const Codecs& codecs) {
  detail::check_input(x, group, kAllGather);
  check_shape(x, info.input_size, "input_size", kAllGather, group);
  FERRY_CHECK(x.dim() >= 1, InvalidArgument, where(kAllGather, group),
              ": the input must have rows (dim 0), given ", shape_str(x.shape()));
  const int world = group.size();
  if (world == 1) return NoWait<Variable>(x);
  return run(kAllGather, group, codecs, ForwardCollective::kAllGather,
             std::vector<int64_t>(world, x.numel()), with_rows(x.shape(), world * x.size(0)),
             x);
}

Awaitable<Variable> all_gather_base_pooled(const Variable& x, const Group& group,
                                           const Codecs& codecs) {
  detail::check_input(x, group, kAllGather);
  return all_gather_base_pooled(x, AllGatherBaseInfo{x.shape()}, group, codecs);
}

}  // namespace ferry::torchrec
