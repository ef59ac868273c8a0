// The native collectives of one group over MPI (internal): each raw collective takes the way
// the algorithm table chose (NativePath): a persistent request (mpi_persistent.h), rounds of
// point-to-point messages (mpi_exchange.h, groups of 2-4 ranks), or its non-blocking MPI call
// on the group's `coll` communicator (see mpi_world.h). A way the op does not fit falls to the
// next of the three, in that order.
#pragma once

#include <ferry/backends/mpi/mpi_world.h>
#include <ferry/backends/native_collectives.h>

#include <memory>

namespace ferry::detail {

// Registers `comms` as group `group_id` with `world` for as long as the object lives.
std::shared_ptr<NativeCollectives> make_mpi_collectives(std::shared_ptr<MpiWorld> world,
                                                        uint32_t group_id,
                                                        std::shared_ptr<MpiGroupComms> comms);

}  // namespace ferry::detail
