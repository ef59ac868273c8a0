// The backward pass: which nodes run, in which order, and where their gradients go.
#include <ferry/autograd/grad_mode.h>
#include <ferry/autograd/node.h>
#include <ferry/autograd/ops_detail.h>
#include <ferry/autograd/variable.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <span>

namespace ferry {

namespace detail {
namespace {

// Nodes numbered at or below this were recorded before the last backward on this thread
// started: only collectives recorded after it (the current forward) are forced into a backward.
thread_local uint64_t t_consumed_up_to = 0;
// Numbers this thread's backward passes, to mark what a pass has collected.
thread_local uint64_t t_pass = 0;

Tensor sum_of(const Tensor& a, const Tensor& b) {
  Tensor out = empty(a.shape(), a.dtype());
  visit_dtype(a.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, half> ||
                  std::is_same_v<T, bfloat16>) {
      out.vec<T>() = a.vec<T>() + b.vec<T>();
    } else {
      FERRY_THROW(InvalidArgument, "backward: gradients of dtype ", dtype_name(a.dtype()),
                  " cannot be accumulated");
    }
  });
  return out;
}

void add_in_place(Tensor& into, const Tensor& g) {
  visit_dtype(into.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, half> ||
                  std::is_same_v<T, bfloat16>) {
      into.vec<T>() += g.vec<T>();
    }
  });
  into.bump_version();
}

// Takes `g` by value: a gradient moved in stays the only handle to its storage, so a leaf can
// keep it as grad() without the defensive copy finish_leaf makes of shared storage.
void accumulate(Tensor& pending, Tensor g) {
  pending = pending.defined() ? sum_of(pending, g) : std::move(g);
}

// `op` and `what` are called only to word the error: building strings per node would dominate
// the cost of small ops.
template <class Op, class What>
void check_gradient(const Tensor& g, const Shape& shape, DType dtype, const Op& op,
                    const What& what) {
  FERRY_CHECK(g.shape() == shape && g.dtype() == dtype, InvalidArgument, op(),
              ": backward returned a gradient of ", dtype_name(g.dtype()), shape_str(g.shape()),
              " for ", what(), ", which is ", dtype_name(dtype), shape_str(shape),
              " (a gradient must have exactly its input's shape and dtype)");
}

template <class Who>
Tensor run_hooks(const std::vector<GradHook>& hooks, Tensor grad, const Shape& shape, DType dtype,
                 const Who& who) {
  for (const GradHook& hook : hooks) {
    Tensor replaced = hook(grad);
    if (replaced.defined()) {
      check_gradient(replaced, shape, dtype, [] { return "gradient hook"; }, who);
      grad = std::move(replaced);
    }
  }
  return grad;
}

// A leaf's gradient of this backward is complete: hooks, then accumulate into grad().
void finish_leaf(const std::shared_ptr<VariableImpl>& leaf) {
  Tensor g = std::move(leaf->pending);
  leaf->pending = Tensor();
  if (!g.defined()) return;
  Variable handle(leaf);
  g = run_hooks(leaf->hooks, std::move(g), leaf->value.shape(), leaf->value.dtype(),
                [&] { return handle.describe(); });
  if (!leaf->grad.defined()) {
    // grad() is the user's to modify in place (clipping, an in-place all_reduce), so it must
    // not share storage with another gradient or value: identity-like backwards hand the same
    // tensor to several inputs.
    leaf->grad = g.owns_storage_alone() ? std::move(g) : g.clone();
    leaf->grad_is_private = true;
  } else if (leaf->grad_is_private) {
    add_in_place(leaf->grad, g);
  } else {
    leaf->grad = sum_of(leaf->grad, g);
    leaf->grad_is_private = true;
  }
  for (const PostAccumulateHook& hook : leaf->post_hooks) hook(handle);
}

// Everything a backward touches, so that an error part way leaves no stale bookkeeping.
class Pass {
 public:
  // The lists start from the ones the thread's previous pass grew, so a training step's
  // backward does not allocate them again (a backward inside a hook starts empty).
  Pass() {
    order_.swap(t_spare.order);
    nodes_.swap(t_spare.nodes);
    leaves_.swap(t_spare.leaves);
    grads_.swap(t_spare.grads);
  }
  ~Pass() {
    for (Node* n : nodes_) {
      for (Tensor& t : n->pending()) t = Tensor();
    }
    for (auto& leaf : leaves_) {
      leaf->pending = Tensor();
      leaf->pending_edges = 0;
    }
    order_.clear();
    nodes_.clear();
    leaves_.clear();
    grads_.clear();
    if (order_.capacity() > t_spare.order.capacity()) order_.swap(t_spare.order);
    if (nodes_.capacity() > t_spare.nodes.capacity()) nodes_.swap(t_spare.nodes);
    if (leaves_.capacity() > t_spare.leaves.capacity()) leaves_.swap(t_spare.leaves);
    if (grads_.capacity() > t_spare.grads.capacity()) grads_.swap(t_spare.grads);
  }
  Pass(const Pass&) = delete;
  Pass& operator=(const Pass&) = delete;

  void seed(const Variable& root, Tensor grad) {
    VariableImpl* impl = root.impl();
    if (impl->producer) {
      accumulate(impl->producer->pending(impl->output_index), std::move(grad));
      add_node(impl->producer);
      max_root_sequence_ = std::max(max_root_sequence_, impl->producer->sequence());
    } else {
      add_leaf(root.impl_ptr());
      accumulate(impl->pending, std::move(grad));
    }
  }

  // Adds the unrun collectives of the current forward, then everything the collected nodes
  // depend on.
  void collect(uint64_t consumed_up_to) {
    std::vector<std::shared_ptr<Node>>& unrun = t_spare.unrun;  // emptied below, capacity kept
    unrun_collective_nodes(unrun);
    for (auto& node : unrun) {
      if (node->sequence() > consumed_up_to && node->sequence() < max_root_sequence_) {
        add_node(node);
      }
    }
    unrun.clear();
    for (size_t i = 0; i < order_.size(); ++i) {
      for (Edge& edge : order_[i]->edges()) {
        if (edge.node) add_node(edge.node);
        if (edge.leaf) {
          add_leaf(edge.leaf);
          ++edge.leaf->pending_edges;
        }
      }
    }
    std::sort(order_.begin(), order_.end(),
              [](const auto& a, const auto& b) { return a->sequence() > b->sequence(); });
  }

  void run(bool retain_graph) {
    for (auto& leaf : leaves_) {  // roots that are leaves nothing else feeds
      if (leaf->pending_edges == 0) finish_leaf(leaf);
    }
    for (const auto& node : order_) run_node(*node, retain_graph);
  }

 private:
  void add_node(const std::shared_ptr<Node>& node) {
    if (node->collect_in(pass_)) {
      order_.push_back(node);
      nodes_.push_back(node.get());
    }
  }
  void add_leaf(const std::shared_ptr<VariableImpl>& leaf) {
    if (leaf->pass != pass_) {
      leaf->pass = pass_;
      leaves_.push_back(leaf);
    }
  }

  void run_node(Node& node, bool retain_graph) {
    FERRY_CHECK(!node.released(), InvalidArgument, "backward: ", node.name(),
                " was already differentiated by an earlier backward that freed its saved "
                "tensors; pass retain_graph = true to the first backward to run a second one");
    auto& slots = node.outputs();
    // The node's pending gradients move into the pass's list, reused from node to node:
    // apply() takes a std::vector.
    std::vector<Tensor>& grads = grads_;
    grads.clear();
    grads.resize(slots.size());
    for (size_t k = 0; k < node.pending().size(); ++k) grads[k] = std::move(node.pending()[k]);
    bool any = false;
    for (size_t k = 0; k < slots.size(); ++k) {
      if (!grads[k].defined()) continue;
      any = true;
      grads[k] = run_hooks(slots[k].hooks, std::move(grads[k]), slots[k].shape, slots[k].dtype,
                           [&] { return str("output ", k, " of ", node.name()); });
      if (auto retained = slots[k].retained.lock()) retained->grad = grads[k];
    }
    if (any || node.is_collective()) {
      if (node.materialize_grads()) {
        for (size_t k = 0; k < slots.size(); ++k) {
          if (!grads[k].defined() && slots[k].produced) {
            grads[k] = zeros(slots[k].shape, slots[k].dtype);
          }
        }
      }
      std::vector<Tensor> input_grads;
      {
        NoGradGuard no_grad;
        input_grads = node.apply(grads);
      }
      grads.clear();  // the output gradients die here, as before the list was reused
      auto& edges = node.edges();
      FERRY_CHECK(input_grads.size() == edges.size(), InvalidArgument, node.name(),
                  ": backward returned ", input_grads.size(), " gradients, expected ",
                  edges.size(), " (one per input)");
      for (size_t i = 0; i < edges.size(); ++i) {
        deliver(node, edges[i], i, std::move(input_grads[i]));
      }
      // The emptied list goes to this thread's spares, for the next closure's tensor_list()
      // or apply()'s input values.
      input_grads.clear();
      TensorListSpares::give(std::move(input_grads));
    } else {
      for (auto& edge : node.edges()) {
        if (edge.leaf && --edge.leaf->pending_edges == 0) finish_leaf(edge.leaf);
      }
    }
    node.mark_run();
    if (!retain_graph) {
      node.release();
      node.mark_released();
    }
  }

  void deliver(Node& node, Edge& edge, size_t i, Tensor g) {
    if (edge.node) {
      if (!g.defined()) return;
      const OutputSlot& slot = edge.node->outputs()[edge.output_index];
      check_gradient(g, slot.shape, slot.dtype, [&] { return node.name(); },
                     [&] { return str("input ", i); });
      accumulate(edge.node->pending(edge.output_index), std::move(g));
    } else if (edge.leaf) {
      if (g.defined()) {
        check_gradient(g, edge.leaf->value.shape(), edge.leaf->value.dtype(),
                       [&] { return node.name(); }, [&] {
          return str("input ", i, " (", Variable(edge.leaf).describe(), ")");
        });
        accumulate(edge.leaf->pending, std::move(g));
      }
      if (--edge.leaf->pending_edges == 0) finish_leaf(edge.leaf);
    }
  }

  // Emptied lists kept between passes.
  struct Spare {
    std::vector<std::shared_ptr<Node>> order;
    std::vector<Node*> nodes;
    std::vector<std::shared_ptr<VariableImpl>> leaves;
    std::vector<Tensor> grads;
    std::vector<std::shared_ptr<Node>> unrun;  // collect()'s scratch, empty between calls
  };
  static thread_local Spare t_spare;

  const uint64_t pass_ = ++t_pass;
  std::vector<std::shared_ptr<Node>> order_;
  std::vector<Node*> nodes_;
  std::vector<std::shared_ptr<VariableImpl>> leaves_;
  std::vector<Tensor> grads_;  // the output gradients of the node running
  uint64_t max_root_sequence_ = 0;
};

thread_local Pass::Spare Pass::t_spare;

}  // namespace
}  // namespace detail

namespace detail {

void run_backward(std::span<const Variable> roots, std::span<const Tensor> gradients,
                  bool retain_graph) {
  FERRY_CHECK(!roots.empty(), InvalidArgument, "backward: no roots given");
  FERRY_CHECK(gradients.empty() || gradients.size() == roots.size(), InvalidArgument,
              "backward: ", roots.size(), " roots but ", gradients.size(), " gradients");
  detail::Pass pass;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Variable& root = roots[i];
    FERRY_CHECK(root.defined(), InvalidArgument, "backward: root ", i, " is undefined");
    FERRY_CHECK(root.requires_grad(), InvalidArgument, "backward: ", root.describe(),
                " does not require grad, so there is nothing to differentiate");
    Tensor grad = gradients.empty() ? Tensor() : gradients[i];
    if (!grad.defined()) {
      FERRY_CHECK(root.numel() == 1, InvalidArgument, "backward: ", root.describe(), " has ",
                  root.numel(), " elements ", shape_str(root.shape()),
                  "; a gradient can be implied only for a one-element root, so pass one of "
                  "that shape");
      grad = ones(root.shape(), root.dtype());
    }
    FERRY_CHECK(grad.shape() == root.shape() && grad.dtype() == root.dtype(), InvalidArgument,
                "backward: the gradient for ", root.describe(), " must be ",
                dtype_name(root.dtype()), shape_str(root.shape()), ", given ",
                dtype_name(grad.dtype()), shape_str(grad.shape()));
    pass.seed(root, std::move(grad));
  }
  pass.collect(detail::t_consumed_up_to);
  detail::t_consumed_up_to = detail::last_recorded_sequence();
  // The pass holds what it collected; kept nodes it did not collect will never be forced.
  detail::release_kept_nodes(detail::t_consumed_up_to);
  pass.run(retain_graph);
}

}  // namespace detail

void backward(const std::vector<Variable>& roots, const std::vector<Tensor>& gradients,
              bool retain_graph) {
  detail::run_backward(roots, gradients, retain_graph);
}

}  // namespace ferry
