// The native collectives of one group over MPI (internal): each raw collective is its
// non-blocking MPI call on the group's `coll` communicator (see mpi_world.h).
#pragma once

#include "backends/mpi/mpi_world.h"
#include "backends/native_collectives.h"

#include <memory>

namespace ferry::detail {

// Registers `comms` as group `group_id` with `world` for as long as the object lives.
std::shared_ptr<NativeCollectives> make_mpi_collectives(std::shared_ptr<MpiWorld> world,
                                                        uint32_t group_id,
                                                        std::shared_ptr<MpiGroupComms> comms);

}  // namespace ferry::detail
