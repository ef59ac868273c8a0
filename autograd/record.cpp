#include <ferry/autograd/record.h>

#include <ferry/runtime/object_pool.h>

#include <deque>
#include <utility>

namespace ferry::detail {

namespace {

// A built-in op: its backward is a closure made by the op.
class LambdaNode final : public Node {
 public:
  LambdaNode(const char* op, size_t num_outputs, BackwardFn backward)
      : Node(op, num_outputs), backward_(std::move(backward)) {}

  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override {
    // The mask of inputs that want a gradient is built in a list of this thread's, reused by
    // every node (a mask per node was an allocation per node and backward). A backward run
    // inside this closure (a hook's) takes the next list; a deque keeps the outer one in place.
    thread_local std::deque<std::vector<bool>> masks;
    thread_local size_t depth = 0;
    if (masks.size() == depth) masks.emplace_back();
    std::vector<bool>& needs = masks[depth];
    needs.assign(edges().size(), false);
    for (size_t i = 0; i < needs.size(); ++i) needs[i] = edges()[i].defined();
    ++depth;
    struct Leave {
      ~Leave() { --depth; }
    } leave;
    return backward_(grad_outputs, needs);
  }

  void release() override { backward_ = nullptr; }

 private:
  BackwardFn backward_;
};

}  // namespace

std::vector<Variable> record(const char* op, VariablePtrs inputs, std::vector<Tensor> outputs,
                             BackwardFn backward) {
  auto node = make_pooled<LambdaNode>(op, outputs.size(), std::move(backward));
  return connect(node, inputs, std::move(outputs));
}

Variable record(const char* op, VariablePtrs inputs, Tensor output, BackwardFn backward) {
  auto node = make_pooled<LambdaNode>(op, 1, std::move(backward));
  return connect_one(node, inputs, std::move(output));
}

SavedTensor save(const Variable& v) { return SavedTensor(v); }

}  // namespace ferry::detail
