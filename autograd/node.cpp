#include <ferry/autograd/node.h>
#include <ferry/autograd/ops_detail.h>
#include <ferry/runtime/object_pool.h>

#include <ferry/autograd/grad_mode.h>

#include <algorithm>
#include <memory_resource>
#include <utility>

namespace ferry::detail {

namespace {

// Recording order of this thread's nodes. Starts at 1 so that 0 can mean "no node".
thread_local uint64_t t_next_sequence = 1;
thread_local std::vector<std::weak_ptr<Node>> t_collective_nodes;
thread_local std::vector<std::shared_ptr<Node>> t_kept_nodes;

// Freeing the last variable of a long chain would free its nodes recursively, one stack frame
// per node; a deep enough graph would overflow the stack. Nodes that are about to die are moved
// here instead and freed by a loop.
thread_local std::pmr::vector<std::shared_ptr<Node>>* t_graveyard = nullptr;

}  // namespace

Node::Node(std::string name, size_t num_outputs)
    : name_(std::move(name)), sequence_(t_next_sequence++) {
  outputs_.resize(num_outputs);
}

Node::~Node() {
  const auto dies = [](const Edge& edge) { return edge.node && edge.node.use_count() == 1; };
  if (t_graveyard != nullptr) {  // an outer destructor is draining: hand the nodes to it
    for (Edge& edge : edges_) {
      if (dies(edge)) t_graveyard->push_back(std::move(edge.node));
    }
    return;
  }
  if (std::none_of(edges_.begin(), edges_.end(), dies)) return;
  // The graveyard starts on the stack: dropping a training step's graph frees its nodes without
  // a heap allocation unless more than kOnStack wait at once.
  constexpr size_t kOnStack = 16;
  alignas(std::shared_ptr<Node>) std::byte on_stack[kOnStack * sizeof(std::shared_ptr<Node>)];
  std::pmr::monotonic_buffer_resource memory(on_stack, sizeof(on_stack));
  std::pmr::vector<std::shared_ptr<Node>> graveyard(&memory);
  graveyard.reserve(kOnStack);
  for (Edge& edge : edges_) {
    if (dies(edge)) graveyard.push_back(std::move(edge.node));
  }
  t_graveyard = &graveyard;
  while (!graveyard.empty()) {
    std::shared_ptr<Node> node = std::move(graveyard.back());
    graveyard.pop_back();
    node.reset();  // may push more nodes onto the graveyard
  }
  t_graveyard = nullptr;
}

uint64_t last_recorded_sequence() { return t_next_sequence - 1; }

void register_collective_node(const std::shared_ptr<Node>& node) {
  // Forget nodes that died or ran, so the list stays as short as the live collectives.
  std::erase_if(t_collective_nodes, [](const std::weak_ptr<Node>& weak) {
    auto alive = weak.lock();
    return !alive || alive->has_run();
  });
  t_collective_nodes.push_back(node);
}

std::vector<std::shared_ptr<Node>> unrun_collective_nodes() {
  std::vector<std::shared_ptr<Node>> nodes;
  unrun_collective_nodes(nodes);
  return nodes;
}

void unrun_collective_nodes(std::vector<std::shared_ptr<Node>>& out) {
  for (const auto& weak : t_collective_nodes) {
    auto node = weak.lock();
    if (node && !node->has_run() && !node->released()) out.push_back(std::move(node));
  }
}

void keep_until_backward(std::shared_ptr<Node> node) {
  t_kept_nodes.push_back(std::move(node));
}

void release_kept_nodes(uint64_t sequence) {
  std::erase_if(t_kept_nodes, [sequence](const auto& node) { return node->sequence() <= sequence; });
}

bool should_record(VariablePtrs inputs) {
  if (!grad_enabled()) return false;
  for (const Variable* v : inputs) {
    if (v != nullptr && v->defined() && v->requires_grad()) return true;
  }
  return false;
}

bool should_record(const std::vector<Variable>& inputs) {
  if (!grad_enabled()) return false;
  for (const Variable& v : inputs) {
    if (v.defined() && v.requires_grad()) return true;
  }
  return false;
}

namespace {

void wire_edges(Node& node, VariablePtrs inputs) {
  auto& edges = node.edges();
  edges.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Variable* input = inputs[i];
    if (input == nullptr || !input->defined() || !input->requires_grad()) continue;
    VariableImpl* impl = input->impl();
    if (impl->producer) {
      edges[i].node = impl->producer;
      edges[i].output_index = impl->output_index;
    } else {
      edges[i].leaf = input->impl_ptr();
    }
  }
}

Variable make_output(const std::shared_ptr<Node>& node, size_t k, Tensor value) {
  OutputSlot& slot = node->outputs()[k];
  if (!value.defined()) {  // an optional output the op did not produce
    slot.differentiable = false;
    slot.produced = false;
    return Variable();
  }
  slot.shape = value.shape();
  slot.dtype = value.dtype();
  auto impl = make_pooled<VariableImpl>();
  impl->value = std::move(value);
  if (slot.differentiable) {
    impl->requires_grad = true;
    impl->producer = node;
    impl->output_index = static_cast<uint32_t>(k);
  }
  return Variable(std::move(impl));
}

}  // namespace

std::vector<Variable> connect(const std::shared_ptr<Node>& node, VariablePtrs inputs,
                              std::vector<Tensor> output_values) {
  wire_edges(*node, inputs);
  std::vector<Variable> outputs = VariableListSpares::take();  // a list apply_first handed back
  outputs.reserve(output_values.size());
  for (size_t k = 0; k < output_values.size(); ++k) {
    outputs.push_back(make_output(node, k, std::move(output_values[k])));
  }
  if (node->is_collective()) register_collective_node(node);
  // The emptied list of values goes to this thread's spares (a Function's next tensor_list()).
  output_values.clear();
  TensorListSpares::give(std::move(output_values));
  return outputs;
}

Variable connect_one(const std::shared_ptr<Node>& node, VariablePtrs inputs, Tensor output) {
  wire_edges(*node, inputs);
  Variable out = make_output(node, 0, std::move(output));
  if (node->is_collective()) register_collective_node(node);
  return out;
}

}  // namespace ferry::detail
