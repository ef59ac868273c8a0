// Starting the UCX transport for ferry::init() (internal). Compiled whether or not ferry is
// built with UCX (backends/no_ucx.cpp stands in without it), so callers need no UCX headers.
#pragma once

#include <ferry/backends/transport.h>

#include <memory>

namespace ferry {
struct RendezvousOptions;
}

namespace ferry::detail {

// False when this ferry was built without UCX.
bool ucx_built();

// The UCX transport of this process's world. The worker addresses are exchanged through MPI
// when `through_mpi` (MPI_COMM_WORLD's ranks and size; MPI is initialized as for the mpi
// backend and carries nothing else), otherwise through the TCP rendezvous configured by
// `rendezvous` (ferry::init(InitOptions)), or FERRY_RENDEZVOUS / FERRY_RANK / FERRY_WORLD_SIZE /
// FERRY_SECRET when it is null. Throws TransportError without UCX.
std::shared_ptr<Transport> ucx_world_transport(bool through_mpi,
                                               const RendezvousOptions* rendezvous = nullptr);

}  // namespace ferry::detail
