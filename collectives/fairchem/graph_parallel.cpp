#include <ferry/collectives/fairchem/fairchem.h>

#include <ferry/collectives/engine/validator.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <mutex>
#include <set>

namespace ferry::fairchem {

namespace {

// World groups (their per-rank state, compared by owner, so an entry can never be confused with
// a later group that reuses the address) over which a GraphParallel is initialized. Shared by
// every thread of the process: ranks of the local transport are threads.
struct Registry {
  std::mutex mu;
  std::set<std::weak_ptr<detail::GroupImpl>, std::owner_less<std::weak_ptr<detail::GroupImpl>>>
      worlds;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

GraphParallel::~GraphParallel() { release(); }

GraphParallel::GraphParallel(GraphParallel&& other) noexcept
    : gp_(std::move(other.gp_)),
      dp_(std::move(other.dp_)),
      world_(std::move(other.world_)),
      registered_(other.registered_) {
  other.gp_ = Group();
  other.dp_ = Group();
  other.world_.reset();
  other.registered_ = false;
}

GraphParallel& GraphParallel::operator=(GraphParallel&& other) noexcept {
  if (this != &other) {
    release();
    gp_ = std::move(other.gp_);
    dp_ = std::move(other.dp_);
    world_ = std::move(other.world_);
    registered_ = other.registered_;
    other.gp_ = Group();
    other.dp_ = Group();
    other.world_.reset();
    other.registered_ = false;
  }
  return *this;
}

GraphParallel GraphParallel::setup(const Group& world, int gp_size, GpSizePolicy policy) {
  detail::check_group(world, "GraphParallel::setup");
  const int w = world.size();
  const int r = world.rank();
  FERRY_CHECK(gp_size >= 1, InvalidArgument, "GraphParallel::setup on rank ", r,
              ": the graph-parallel size must be >= 1, given ", gp_size, " (world size ", w, ")");
  FERRY_CHECK(policy == GpSizePolicy::Clamp || gp_size <= w, InvalidArgument,
              "GraphParallel::setup (strict) on rank ", r, ": graph-parallel size ", gp_size,
              " exceeds the world size ", w);
  const int g = std::min(gp_size, w);
  FERRY_CHECK(w % g == 0, InvalidArgument, "GraphParallel::setup on rank ", r, ": world size ",
              w, " is not divisible by the graph-parallel size ", g);

  GraphParallel gp;
  {
    // Claimed before the splits so a second setup fails before any communication. gp owns the
    // claim only once it succeeded (its destructor must not release an earlier object's).
    std::lock_guard<std::mutex> lock(registry().mu);
    FERRY_CHECK(registry().worlds.insert(world.weak_impl()).second, InvalidArgument,
                "GraphParallel::setup on rank ", r, ": graph parallelism is already initialized "
                "over ", world.describe(), " (call cleanup() on the earlier GraphParallel first)");
    gp.world_ = world.weak_impl();
    gp.registered_ = true;
  }
  // From here on a failure (of a split) releases the claim through gp's destructor.
  gp.dp_ = world.split(/*color=*/r % g, /*key=*/r);  // columns {j, j+g, ...}
  gp.gp_ = world.split(/*color=*/r / g, /*key=*/r);  // rows {i*g, ..., i*g+g-1}
  return gp;
}

void GraphParallel::release() noexcept {
  if (registered_) {
    std::lock_guard<std::mutex> lock(registry().mu);
    registry().worlds.erase(world_);
  }
  gp_ = Group();
  dp_ = Group();
  world_.reset();
  registered_ = false;
}

void GraphParallel::cleanup() {
  check_initialized("cleanup");
  release();
}

void GraphParallel::check_initialized(const char* what) const {
  FERRY_CHECK(initialized(), InvalidArgument, "GraphParallel::", what,
              ": graph parallelism is not initialized (call GraphParallel::setup first; ",
              "this object was never set up, was moved from, or was cleaned up)");
}

const Group& GraphParallel::gp_group() const {
  check_initialized("gp_group");
  return gp_;
}

const Group& GraphParallel::dp_group() const {
  check_initialized("dp_group");
  return dp_;
}

int GraphParallel::gp_rank() const {
  check_initialized("gp_rank");
  return gp_.rank();
}

int GraphParallel::gp_size() const {
  check_initialized("gp_size");
  return gp_.size();
}

int GraphParallel::dp_rank() const {
  check_initialized("dp_rank");
  return dp_.rank();
}

int GraphParallel::dp_size() const {
  check_initialized("dp_size");
  return dp_.size();
}

}  // namespace ferry::fairchem
