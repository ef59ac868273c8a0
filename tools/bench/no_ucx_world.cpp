// ferry-bench without UCX: --transport ucx says why it cannot run.
#include "tools/bench/launcher.h"
#include "tools/bench/options.h"

namespace ferry::bench {

std::shared_ptr<Transport> make_ucx_world(
    int, int, const std::function<std::vector<std::string>(const std::string&)>&) {
  throw UsageError("transport ucx is not built into this ferry (meson did not find ucx)");
}

}  // namespace ferry::bench
