#include "autograd/record.h"

#include <utility>

namespace ferry::detail {

namespace {

// A built-in op: its backward is a closure made by the op.
class LambdaNode final : public Node {
 public:
  LambdaNode(const char* op, size_t num_outputs, BackwardFn backward)
      : Node(op, num_outputs), backward_(std::move(backward)) {}

  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override {
    std::vector<bool> needs(edges().size());
    for (size_t i = 0; i < needs.size(); ++i) needs[i] = edges()[i].defined();
    return backward_(grad_outputs, needs);
  }

  void release() override { backward_ = nullptr; }

 private:
  BackwardFn backward_;
};

}  // namespace

std::vector<Variable> record(const char* op, const std::vector<const Variable*>& inputs,
                             std::vector<Tensor> outputs, BackwardFn backward) {
  auto node = std::make_shared<LambdaNode>(op, outputs.size(), std::move(backward));
  return connect(node, inputs, std::move(outputs));
}

Variable record(const char* op, const std::vector<const Variable*>& inputs, Tensor output,
                BackwardFn backward) {
  std::vector<Tensor> outputs;
  outputs.push_back(std::move(output));
  return record(op, inputs, std::move(outputs), std::move(backward))[0];
}

SavedTensor save(const Variable& v) { return SavedTensor(v); }

}  // namespace ferry::detail
