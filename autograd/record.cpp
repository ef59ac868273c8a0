#include <ferry/autograd/record.h>

#include <utility>

namespace ferry::detail {

namespace {

// A built-in op: its backward is a closure made by the op.
class LambdaNode final : public Node {
 public:
  LambdaNode(const char* op, size_t num_outputs, BackwardFn backward)
      : Node(op, num_outputs), backward_(std::move(backward)) {}

  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override {
    if (needs_.size() != edges().size()) {  // the edges are fixed once recorded
      needs_.resize(edges().size());
      for (size_t i = 0; i < needs_.size(); ++i) needs_[i] = edges()[i].defined();
    }
    return backward_(grad_outputs, needs_);
  }

  void release() override { backward_ = nullptr; }

 private:
  BackwardFn backward_;
  std::vector<bool> needs_;
};

}  // namespace

std::vector<Variable> record(const char* op, VariablePtrs inputs, std::vector<Tensor> outputs,
                             BackwardFn backward) {
  auto node = std::make_shared<LambdaNode>(op, outputs.size(), std::move(backward));
  return connect(node, inputs, std::move(outputs));
}

Variable record(const char* op, VariablePtrs inputs, Tensor output, BackwardFn backward) {
  auto node = std::make_shared<LambdaNode>(op, 1, std::move(backward));
  return connect_one(node, inputs, std::move(output));
}

SavedTensor save(const Variable& v) { return SavedTensor(v); }

}  // namespace ferry::detail
