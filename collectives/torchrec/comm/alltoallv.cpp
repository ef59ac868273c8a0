// alltoallv (torchrec comm_ops): the legacy all-to-all of a list of tables, removed from torchrec
// in 2024-12 and kept for ported code. Its asynchronous backward does not divide by W, whatever the
// gradient-division switch says (torchrec's All2Allv_Req.backward never divided); its sync path
// does when the switch was on at forward, as torchrec's AllToAllSingle.
#include <ferry/collectives/torchrec/comm/alltoall_op.h>
#include <ferry/collectives/torchrec/comm/comm_ops.h>
#include <ferry/collectives/differentiable/checks.h>
#include <ferry/runtime/error.h>

namespace ferry::torchrec {
namespace {

using detail::list_str;
using detail::sum_of;
using detail::where;

constexpr const char* kAllToAllV = "alltoallv";

class AllToAllVOp final : public detail::AllToAllCommOp {
 public:
  AllToAllVOp(Group group, const Codecs& codecs, All2AllVInfo info)
      : AllToAllCommOp(kAllToAllV, std::move(group), codecs, detail::Division::kNever,
                       info.input_split_sizes, info.output_split_sizes),
        info_(std::move(info)) {}

 protected:
  // The tables side by side: [B_g, sum D_t], whose row blocks go to the ranks in order.
  Tensor forward_send(const std::vector<Tensor>& inputs) override {
    return inputs.size() == 1 ? inputs[0] : cat(inputs, 1);
  }
  // One [B_me, dims[i]] tensor per source rank.
  std::vector<Tensor> forward_outputs(const Tensor& received) override {
    std::vector<Tensor> outputs;
    int64_t start = 0;
    for (int64_t dim : info_.dims_sum_per_rank) {
      const int64_t n = info_.B_local * dim;
      outputs.push_back(received.narrow(0, start, n).reshape({info_.B_local, dim}));
      start += n;
    }
    return outputs;
  }
  Tensor gradient_send(const std::vector<Tensor>& grad_outputs, bool) override {
    std::vector<Tensor> flats;
    for (const Tensor& g : grad_outputs) flats.push_back(g.flatten());
    return cat(flats, 0);
  }
  // [B_g, sum D_t] cut back into the tables' columns.
  std::vector<Tensor> input_gradients(const Tensor& received) override {
    const Tensor rows = received.reshape({info_.B_global, -1});
    std::vector<Tensor> grads;
    int64_t col = 0;
    for (int64_t d : info_.D_local_list) {
      grads.push_back(rows.narrow_copy(1, col, d));
      col += d;
    }
    return grads;
  }

 private:
  All2AllVInfo info_;
};

}  // namespace

All2AllVInfo all2allv_info(const std::vector<Variable>& inputs, const Group& group,
                           const std::optional<std::vector<int64_t>>& out_split,
                           const std::optional<std::vector<int64_t>>& per_rank_split_lengths) {
  ferry::detail::check_group(group, kAllToAllV);
  FERRY_CHECK(!inputs.empty(), InvalidArgument, where(kAllToAllV, group),
              ": needs at least one input table");
  const int world = group.size(), me = group.rank();
  All2AllVInfo info;
  for (size_t t = 0; t < inputs.size(); ++t) {
    detail::check_input(inputs[t], group, kAllToAllV);
    FERRY_CHECK(inputs[t].dim() == 2, InvalidArgument, where(kAllToAllV, group), ": inputs[",
                t, "] must be 2-D [B_global, D_t], given ", shape_str(inputs[t].shape()));
    FERRY_CHECK(inputs[t].size(0) == inputs[0].size(0) && inputs[t].dtype() == inputs[0].dtype(),
                InvalidArgument, where(kAllToAllV, group), ": inputs[", t, "] ",
                shape_str(inputs[t].shape()), " ", dtype_name(inputs[t].dtype()),
                " must have the rows and dtype of inputs[0] ", shape_str(inputs[0].shape()),
                " ", dtype_name(inputs[0].dtype()));
    info.D_local_list.push_back(inputs[t].size(1));
  }
  info.B_global = inputs[0].size(0);
  for (int i = 0; i < world; ++i)
    info.B_local_list.push_back(info.B_global / world + (i < info.B_global % world ? 1 : 0));
  info.B_local = info.B_local_list[me];
  if (out_split) {
    detail::check_per_rank(*out_split, "out_split", group, kAllToAllV);
    info.dims_sum_per_rank = *out_split;
  } else {
    FERRY_CHECK(per_rank_split_lengths.has_value(), InvalidArgument, where(kAllToAllV, group),
                ": needs out_split or per_rank_split_lengths to know the output dims");
    detail::check_per_rank(*per_rank_split_lengths, "per_rank_split_lengths", group, kAllToAllV);
    for (int64_t n : *per_rank_split_lengths)
      info.dims_sum_per_rank.push_back(n * info.D_local_list[0]);
  }
  const int64_t my_dims = sum_of(info.D_local_list);
  FERRY_CHECK(info.dims_sum_per_rank[me] == my_dims, InvalidArgument, where(kAllToAllV, group),
              ": the output dims ", list_str(info.dims_sum_per_rank), " say this rank holds ",
              info.dims_sum_per_rank[me], " columns, its inputs have ", my_dims, " (",
              list_str(info.D_local_list), ")");
  for (int i = 0; i < world; ++i) {
    info.input_split_sizes.push_back(info.B_local_list[i] * my_dims);
    info.output_split_sizes.push_back(info.B_local * info.dims_sum_per_rank[i]);
  }
  return info;
}

Awaitable<std::vector<Variable>> alltoallv(
    const std::vector<Variable>& inputs, const Group& group,
    const std::optional<std::vector<int64_t>>& out_split,
    const std::optional<std::vector<int64_t>>& per_rank_split_lengths, const Codecs& codecs) {
  All2AllVInfo info = all2allv_info(inputs, group, out_split, per_rank_split_lengths);
  return detail::run_comm_op(std::make_shared<AllToAllVOp>(group, codecs, std::move(info)),
                             inputs);
}

}  // namespace ferry::torchrec
