// The native collectives of one group over MPI (internal): each raw collective is its
// non-blocking MPI call on the group's `coll` communicator (see mpi_world.h), except that in
// groups of 2-4 ranks all_gather, all_to_all and the v-forms, and above 8 KiB all_reduce,
// reduce_scatter and (2 ranks) broadcast, run as rounds of point-to-point messages
// (mpi_exchange.h), and that the other small ops run as persistent requests (mpi_persistent.h).
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
