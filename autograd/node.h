// The tape's nodes and the state behind a Variable (internal).
//
// A node is one recorded op. It points at where the gradient of each of its inputs goes (the
// node that produced the input, or the leaf itself) and numbers itself in recording order, so
// that backward can run the nodes it needs in exact reverse recording order. Nodes are owned by
// the variables they produced (and by the nodes downstream of those), as in torch: dropping the
// outputs of a forward frees its graph without a backward.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <memory_resource>
#include <span>
#include <string>
#include <vector>

namespace ferry::detail {

struct VariableImpl {
  Tensor value;
  Tensor grad;
  bool grad_is_private = false;  // grad was allocated by the engine, so it may be added to in place
  bool requires_grad = false;
  std::string name;
  std::shared_ptr<Node> producer;  // null for leaves
  uint32_t output_index = 0;
  std::vector<GradHook> hooks;                     // leaves only (a non-leaf's live on its node)
  std::vector<PostAccumulateHook> post_hooks;      // leaves only

  // Backward bookkeeping (leaves): the gradient gathered so far and how many edges into this
  // leaf have still to run.
  Tensor pending;
  int pending_edges = 0;
  uint64_t pass = 0;  // the backward pass that last collected this leaf
};

// Where the gradient of one input of a node goes.
struct Edge {
  std::shared_ptr<Node> node;           // the producer of the input, or
  std::shared_ptr<VariableImpl> leaf;   // the input itself when it is a leaf requiring grad
  uint32_t output_index = 0;            // which output of `node`
  bool defined() const { return node != nullptr || leaf != nullptr; }
};

// What a node knows about each of its outputs.
struct OutputSlot {
  Shape shape;
  DType dtype = DType::Float32;
  bool differentiable = true;
  bool produced = true;  // false when the op returned an undefined tensor for this output
  std::vector<GradHook> hooks;
  std::weak_ptr<VariableImpl> retained;  // set by retain_grad()
};

class Node {
 public:
  Node(std::string name, size_t num_outputs);
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // The op's name, for messages: made when asked (a FunctionNode asks its Function), since a
  // name longer than 15 characters would cost every recorded call an allocation.
  virtual std::string name() const { return name_; }
  uint64_t sequence() const { return sequence_; }

  // Computes the gradients of the inputs (one per edge; undefined = none) from the gradients of
  // the outputs. `grad_outputs` holds zeros for outputs without a gradient when
  // materialize_grads() is true, undefined tensors otherwise.
  virtual std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) = 0;
  // Frees what apply() needs (saved tensors, closures); called after a backward without
  // retain_graph.
  virtual void release() = 0;
  virtual bool is_collective() const { return false; }
  virtual bool materialize_grads() const { return true; }

  std::pmr::vector<Edge>& edges() { return edges_; }
  std::pmr::vector<OutputSlot>& outputs() { return outputs_; }

  // Backward bookkeeping: the gradient gathered so far for each output.
  std::pmr::vector<Tensor>& pending() { return pending_; }
  Tensor& pending(size_t k) {
    if (pending_.size() != outputs_.size()) pending_.resize(outputs_.size());
    return pending_[k];
  }
  bool released() const { return released_; }
  void mark_released() { released_ = true; }
  bool has_run() const { return has_run_; }
  void mark_run() { has_run_ = true; }
  // Marks the node as collected by backward pass `pass`; false if it already was.
  bool collect_in(uint64_t pass) {
    if (pass_ == pass) return false;
    pass_ = pass;
    return true;
  }

 private:
  std::string name_;
  uint64_t sequence_;
  // The edges, output slots and pending gradients of an op with up to three inputs and one
  // output (most ops) live in the node itself: recording an op and running its backward would
  // otherwise allocate the three lists. More spill to the heap. Declared before the lists, so
  // that it outlives them.
  static constexpr size_t kInlineBytes =
      3 * sizeof(Edge) + sizeof(OutputSlot) + sizeof(Tensor) + 64;
  alignas(std::max_align_t) std::byte inline_[kInlineBytes];
  std::pmr::monotonic_buffer_resource memory_{inline_, kInlineBytes};
  std::pmr::vector<Edge> edges_{&memory_};
  std::pmr::vector<OutputSlot> outputs_{&memory_};
  std::pmr::vector<Tensor> pending_{&memory_};
  bool released_ = false;
  bool has_run_ = false;
  uint64_t pass_ = 0;
};

// Registers a collective node with this thread's tape so that backward can find it even when
// the roots do not depend on it.
void register_collective_node(const std::shared_ptr<Node>& node);
// The sequence number of the last node recorded on this thread (0 if none).
uint64_t last_recorded_sequence();
// The collective nodes of this thread that are alive and have not run a backward yet.
std::vector<std::shared_ptr<Node>> unrun_collective_nodes();
// The same, appended to `out` (a caller's list reused from call to call).
void unrun_collective_nodes(std::vector<std::shared_ptr<Node>>& out);

// ferry::backward over `roots` and `gradients` (empty: all implied; else one per root) as
// they lie: Variable::backward passes its one root without a list of each.
void run_backward(std::span<const Variable> roots, std::span<const Tensor> gradients,
                  bool retain_graph);
// Keeps a collective node that no variable holds alive until the next backward on this thread
// (which runs it, if the node was recorded before its roots, or else passes it by): a request
// dropped before its wait still takes part in its backward collective (req_wait.h).
void keep_until_backward(std::shared_ptr<Node> node);
// Called by backward: drops the kept nodes numbered at or below `sequence`.
void release_kept_nodes(uint64_t sequence);

using VariablePtrs = std::span<const Variable* const>;

// Makes the variables for a node's outputs and wires the node's edges to the inputs. `inputs`
// may hold undefined variables (no edge). Returns one variable per output value; outputs the
// node marks non-differentiable come back as plain leaves without requires_grad, and undefined
// output values as undefined variables.
std::vector<Variable> connect(const std::shared_ptr<Node>& node, VariablePtrs inputs,
                              std::vector<Tensor> output_values);
// The same for a node with exactly one output.
Variable connect_one(const std::shared_ptr<Node>& node, VariablePtrs inputs, Tensor output);

// True when grad mode is on and one of `inputs` requires grad: only then is a node recorded.
bool should_record(VariablePtrs inputs);
inline bool should_record(std::initializer_list<const Variable*> inputs) {
  return should_record(VariablePtrs(inputs.begin(), inputs.size()));
}
// The same over variables held by value (apply()'s inputs).
bool should_record(const std::vector<Variable>& inputs);

}  // namespace ferry::detail
