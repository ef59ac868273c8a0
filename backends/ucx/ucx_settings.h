// The UCX settings ferry chooses for its own context (internal).
//
// Each applies only when the user did not set the matching UCX_* variable, so UCX_TLS=tcp,self
// and any other UCX variable keep their usual meaning. See docs/transports.md (the UCX
// transport) for the measurements behind them.
#pragma once

#include <ucp/api/ucp.h>

#include <cstddef>
#include <functional>
#include <string>

namespace ferry::detail {

// FERRY_UCX_ERROR_HANDLING=peer (default): endpoints in UCP_ERR_HANDLING_MODE_PEER, so UCX
// reports dead peers. =none: UCP_ERR_HANDLING_MODE_NONE, which lets UCX 1.13 keep its own CMA
// (before ferry had its own, ucx_cma.h, all_gather / all_to_all were ~20% faster at 16-64 MiB
// that way) but leaves dead peers to ferry's pidfd watch (ranks on this host only) and to
// deadlines, and UCX may abort the process on a transport error. Throws InvalidArgument for
// another value.
bool ucx_peer_error_handling();

// The smallest message ferry sends to a rank on this host by its own CMA protocol (ucx_cma.h);
// SIZE_MAX when FERRY_UCX_CMA=0 turns it off. FERRY_UCX_CMA_MIN_BYTES sets it (default
// kUcxCmaDefaultMinBytes, never below 1024). Throws InvalidArgument for a malformed value.
inline constexpr size_t kUcxCmaDefaultMinBytes = 64 * 1024;
size_t ucx_cma_min_bytes();

// Puts ferry's defaults for UCT transports into the environment (where UCT reads them) unless
// the user set them. Call before ucp_config_read.
void apply_ucx_transport_defaults();
// Applies ferry's UCP-level defaults to `config` (from ucp_config_read). Throws TransportError
// when UCX rejects one.
void apply_ucx_defaults(ucp_config_t* config);

// Runs `make` (which creates the side channel's worker, ucx_transport.cpp) with small receive
// pools for the shared-memory transports, unless the user set their sizes: the channel carries a
// few bytes per peer, once, and UCX's default pools (512 buffers of 8 KiB per transport) made
// the side worker cost each process 4.2 MB of resident memory (1.1 MB with these). UCT reads
// these sizes from the environment when a worker opens its interfaces, so they are set there for
// the call and removed after it, at the moment ferry sets its other UCX variables (the
// transport is being made; no other worker is created meanwhile).
void with_small_shm_receive_pools(const std::function<void()>& make);

}  // namespace ferry::detail
