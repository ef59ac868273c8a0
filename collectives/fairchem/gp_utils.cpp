// gp_utils' module-level functions over the default layout (fairchem.h, "module functions").
#include <ferry/collectives/fairchem/fairchem.h>

#include <ferry/collectives/fairchem/internal.h>
#include <ferry/runtime/error.h>

#include <memory>
#include <mutex>

namespace ferry::fairchem {

namespace {

// The default of a process that is one rank (mpi, ucx, a local world of one).
struct ProcessDefault {
  std::mutex mu;
  std::shared_ptr<GraphParallel> layout;
};

ProcessDefault& process_default() {
  static ProcessDefault d;
  return d;
}

// The default of a rank that is a thread of a local world: its thread's own, released (groups
// and registration) when the thread ends, so that a rank that never called cleanup_gp leaves
// nothing behind for a later world.
thread_local std::shared_ptr<GraphParallel> t_default;

// Ranks of the local transport are threads of this process: several ranks, several defaults.
bool ranks_are_threads(const Group& world) {
  return world.transport().name() == "local" && world.transport().size() > 1;
}

// The default this thread sees, or null. Shared, so that a cleanup_gp on another thread of the
// process cannot pull the layout from under a caller that is using it.
std::shared_ptr<GraphParallel> current() {
  if (t_default) return t_default;
  ProcessDefault& d = process_default();
  std::lock_guard<std::mutex> lock(d.mu);
  return d.layout;
}

std::shared_ptr<GraphParallel> require(const char* op) {
  std::shared_ptr<GraphParallel> layout = current();
  FERRY_CHECK(layout != nullptr, InvalidArgument, "fairchem::", op,
              ": graph parallelism is not initialized (call setup_gp first; fairchem would "
              "answer for the world group here)");
  return layout;
}

void setup_default(const Group& world, int gp_size, GpSizePolicy policy, const char* op) {
  FERRY_CHECK(current() == nullptr, InvalidArgument, "fairchem::", op,
              ": graph parallelism is already initialized (call cleanup_gp first)");
  // Collective: no lock is held while the groups are split.
  auto layout = std::make_shared<GraphParallel>(GraphParallel::setup(world, gp_size, policy));
  if (ranks_are_threads(world)) {
    t_default = std::move(layout);
    return;
  }
  ProcessDefault& d = process_default();
  std::lock_guard<std::mutex> lock(d.mu);
  FERRY_CHECK(d.layout == nullptr, InvalidArgument, "fairchem::", op,
              ": graph parallelism was initialized by another thread meanwhile");
  d.layout = std::move(layout);
}

}  // namespace

int default_gp_world_size(const char* op) { return require(op)->gp_size(); }

void setup_gp(const Group& world, int gp_gpus) {
  setup_default(world, gp_gpus, GpSizePolicy::Clamp, "setup_gp");
}

void setup_graph_parallel_groups(const Group& world, int graph_parallel_group_size) {
  setup_default(world, graph_parallel_group_size, GpSizePolicy::Strict,
                "setup_graph_parallel_groups");
}

void cleanup_gp() {
  std::shared_ptr<GraphParallel> layout;
  if (t_default) {
    layout = std::move(t_default);
  } else {
    ProcessDefault& d = process_default();
    std::lock_guard<std::mutex> lock(d.mu);
    layout = std::move(d.layout);
  }
  FERRY_CHECK(layout != nullptr, InvalidArgument,
              "fairchem::cleanup_gp: graph parallelism is not initialized (setup_gp was not "
              "called, or cleanup_gp was already)");
  layout->cleanup();
}

bool initialized() { return current() != nullptr; }
Group get_gp_group() { return require("get_gp_group")->gp_group(); }
Group get_dp_group() { return require("get_dp_group")->dp_group(); }
int get_gp_rank() { return require("get_gp_rank")->gp_rank(); }
int get_dp_rank() { return require("get_dp_rank")->dp_rank(); }
int get_gp_world_size() { return require("get_gp_world_size")->gp_size(); }
int get_dp_world_size() { return require("get_dp_world_size")->dp_size(); }

Variable copy_to_model_parallel_region(const Variable& x) {
  return copy_to_model_parallel_region(x, require("copy_to_model_parallel_region")->gp_group());
}

Variable reduce_from_model_parallel_region(const Variable& x) {
  return reduce_from_model_parallel_region(
      x, require("reduce_from_model_parallel_region")->gp_group());
}

Variable scatter_to_model_parallel_region(const Variable& x, int64_t dim) {
  return scatter_to_model_parallel_region(
      x, require("scatter_to_model_parallel_region")->gp_group(), dim);
}

Variable gather_from_model_parallel_region(const Variable& x, int64_t dim) {
  return gather_from_model_parallel_region(
      x, require("gather_from_model_parallel_region")->gp_group(), dim);
}

Variable gather_from_model_parallel_region_sum_grad(const Variable& x, int64_t dim) {
  return gather_from_model_parallel_region_sum_grad(
      x, require("gather_from_model_parallel_region_sum_grad")->gp_group(), dim);
}

Variable scale_backward_grad(const Variable& x) {
  return scale_backward_grad(x, require("scale_backward_grad")->gp_group());
}

}  // namespace ferry::fairchem
