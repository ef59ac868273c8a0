// ferry-bench's UCX world: ferry's public UCX transport, addresses exchanged by the launcher.
#include <ferry/backends/ucx/ucx_transport.h>
#include "tools/bench/launcher.h"

namespace ferry::bench {

std::shared_ptr<Transport> make_ucx_world(
    int rank, int size,
    const std::function<std::vector<std::string>(const std::string&)>& all_gather) {
  return make_ucx_transport(rank, size, all_gather);
}

}  // namespace ferry::bench
