#include <ferry/collectives/differentiable/all_to_all_async.h>

#include <ferry/collectives/collectives.h>
#include <ferry/collectives/differentiable/checks.h>
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
    return detail::str("all_to_all_single_async on rank ", group_.rank(), " of group ",
                       group_.id(), " (size ", group_.size(), ")");
  }

  Work launch(const std::vector<Tensor>& inputs) override {
    y_ = receive_buffer(inputs[0], output_splits_);
    return ferry::all_to_all_single(inputs[0], y_, output_splits_, input_splits_, group_);
  }
  std::vector<Tensor> finish() override { return {std::move(y_)}; }

  // The transpose of a permutation of rows: the same exchange with the splits swapped.
  Work launch_gradient(const std::vector<Tensor>& grad_outputs) override {
    dx_ = receive_buffer(grad_outputs[0], input_splits_);
    return ferry::all_to_all_single(grad_outputs[0], dx_, input_splits_, output_splits_, group_);
  }
  std::vector<Tensor> finish_gradient() override { return {std::move(dx_)}; }

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

void check_splits(const std::vector<int64_t>& splits, const char* name, const Group& group) {
  FERRY_CHECK(splits.size() == static_cast<size_t>(group.size()), InvalidArgument,
              "all_to_all_single_async on rank ", group.rank(), ": ", name,
              " must have one entry per rank (", group.size(), "), given ", splits.size());
  for (size_t k = 0; k < splits.size(); ++k) {
    FERRY_CHECK(splits[k] >= 0, InvalidArgument, "all_to_all_single_async on rank ",
                group.rank(), ": ", name, "[", k, "] must be >= 0, given ", splits[k]);
  }
}

AsyncRequest<Variable> launch(const Variable& x, std::vector<int64_t> output_splits,
                              std::vector<int64_t> input_splits, const Group& group) {
  auto op = std::make_shared<AllToAllSingleOp>(group, std::move(output_splits),
                                               std::move(input_splits));
  return launch_async(std::move(op), {x}).transform<Variable>(
      [](std::vector<Variable> outputs) { return outputs[0]; });
}

}  // namespace

AsyncRequest<Variable> all_to_all_single_async(const Variable& x, const Group& group) {
  detail::check_differentiable_input(x, group, "all_to_all_single_async");
  detail::check_has_rows(x, group, "all_to_all_single_async");
  return launch(x, {}, {}, group);  // the raw op checks that the rows divide by W
}

AsyncRequest<Variable> all_to_all_single_async(const Variable& x,
                                               const std::vector<int64_t>& output_split_sizes,
                                               const std::vector<int64_t>& input_split_sizes,
                                               const Group& group) {
  detail::check_differentiable_input(x, group, "all_to_all_single_async");
  detail::check_has_rows(x, group, "all_to_all_single_async");
  check_splits(output_split_sizes, "output_split_sizes", group);
  check_splits(input_split_sizes, "input_split_sizes", group);
  return launch(x, output_split_sizes, input_split_sizes, group);
}

}  // namespace ferry
