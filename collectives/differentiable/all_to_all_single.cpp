// The differentiable all_to_all_single, written once as a Req/Wait op: the blocking form
// (differentiable.h) launches and waits for it in one node, the asynchronous one
// (all_to_all_async.h) in a Req node and a Wait node.
#include <ferry/collectives/differentiable/all_to_all_async.h>
#include <ferry/collectives/differentiable/differentiable.h>

#include <ferry/collectives/collectives.h>
#include <ferry/collectives/differentiable/checks.h>
#include <ferry/collectives/differentiable/launch_and_wait.h>
#include <ferry/runtime/error.h>

#include <numeric>

namespace ferry {
namespace {

int64_t sum_of(const std::vector<int64_t>& rows) {
  return std::accumulate(rows.begin(), rows.end(), int64_t{0});
}

// The four steps over the raw all_to_all_single, which validates every call and keeps the
// tensors it was given alive until its Work completed.
class AllToAllSingleOp final : public ReqWaitOp {
 public:
  AllToAllSingleOp(Group group, std::vector<int64_t> output_splits,
                   std::vector<int64_t> input_splits)
      : group_(std::move(group)),
        output_splits_(std::move(output_splits)),
        input_splits_(std::move(input_splits)) {}

  std::string name() const override { return "all_to_all_single"; }
  std::string describe() const override {
    return detail::str("all_to_all_single on rank ", group_.rank(), " of group ", group_.id(),
                       " (size ", group_.size(), ")");
  }

  Work launch(const std::vector<Tensor>& inputs) override {
    y_ = receive_buffer(inputs[0], output_splits_);
    return ferry::all_to_all_single(inputs[0], y_, output_splits_, input_splits_, group_);
  }
  std::vector<Tensor> finish() override { return detail::only(std::move(y_)); }

  // The transpose of a permutation of rows: the same exchange with the splits swapped.
  Work launch_gradient(const std::vector<Tensor>& grad_outputs) override {
    dx_ = receive_buffer(grad_outputs[0], input_splits_);
    return ferry::all_to_all_single(grad_outputs[0], dx_, input_splits_, output_splits_, group_);
  }
  std::vector<Tensor> finish_gradient() override { return detail::only(std::move(dx_)); }

 private:
  // Receiving `splits` rows in all (equal form: as many rows as `sent`).
  static Tensor receive_buffer(const Tensor& sent, const std::vector<int64_t>& splits) {
    if (splits.empty()) return empty(sent.shape(), sent.dtype());
    return empty(with_rows(sent.shape(), sum_of(splits)), sent.dtype());
  }

  Group group_;
  std::vector<int64_t> output_splits_;  // both empty: equal blocks
  std::vector<int64_t> input_splits_;
  Tensor y_;   // the forward's receive buffer, until finish hands it over
  Tensor dx_;  // the gradient's, until finish_gradient does
};

// What both forms check before anything moves; `op` names the form called.
void check_equal(const Variable& x, const Group& group, const char* op) {
  detail::check_differentiable_input(x, group, op);
  detail::check_has_rows(x, group, op);
  detail::check_rows_divisible(x, group, op);
}

// The split form's checks; the raw op checks that the input splits add up to x's rows.
void check_split(const Variable& x, const std::vector<int64_t>& output_split_sizes,
                 const std::vector<int64_t>& input_split_sizes, const Group& group,
                 const char* op) {
  detail::check_differentiable_input(x, group, op);
  detail::check_has_rows(x, group, op);
  detail::check_per_rank(output_split_sizes, "output_split_sizes", group, op);
  detail::check_per_rank(input_split_sizes, "input_split_sizes", group, op);
}

AsyncRequest<Variable> launch(const Variable& x, std::vector<int64_t> output_splits,
                              std::vector<int64_t> input_splits, const Group& group) {
  auto op = std::make_shared<AllToAllSingleOp>(group, std::move(output_splits),
                                               std::move(input_splits));
  return launch_async_first(std::move(op), {x});
}

}  // namespace

Variable all_to_all_single(const Variable& x, const Group& group) {
  check_equal(x, group, "all_to_all_single");
  return detail::launch_and_wait<AllToAllSingleOp>({x}, group, std::vector<int64_t>{},
                                                   std::vector<int64_t>{})[0];
}

Variable all_to_all_single(const Variable& x, const std::vector<int64_t>& output_split_sizes,
                           const std::vector<int64_t>& input_split_sizes, const Group& group) {
  check_split(x, output_split_sizes, input_split_sizes, group, "all_to_all_single");
  return detail::launch_and_wait<AllToAllSingleOp>({x}, group, output_split_sizes,
                                                   input_split_sizes)[0];
}

AsyncRequest<Variable> all_to_all_single_async(const Variable& x, const Group& group) {
  check_equal(x, group, "all_to_all_single_async");
  return launch(x, {}, {}, group);
}

AsyncRequest<Variable> all_to_all_single_async(const Variable& x,
                                               const std::vector<int64_t>& output_split_sizes,
                                               const std::vector<int64_t>& input_split_sizes,
                                               const Group& group) {
  check_split(x, output_split_sizes, input_split_sizes, group, "all_to_all_single_async");
  return launch(x, output_split_sizes, input_split_sizes, group);
}

}  // namespace ferry
