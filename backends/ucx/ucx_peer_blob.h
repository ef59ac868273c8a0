// What each rank of a UCX world publishes in the address exchange, and its decoding (internal).
//
// A rank's blob reaches every peer through the bootstrap (TCP rendezvous or MPI), so a
// receiver decodes bytes another process wrote: every length is checked against the blob's
// size before anything is read (fuzzed by tests/fuzz/fuzz_ucx_peer_blob.cpp).
//
// Layout: host name length (1 byte), host name, pid (4 bytes), start time (8 bytes), the CMA
// token's address (8 bytes) and value (kCmaTokenBytes), the worker address's length (4 bytes),
// the worker address, the side worker's address (the rest); each address at least 1 byte, both
// together at most kMaxUcxAddressBytes. Native byte order: one job runs one build on one kind
// of host.
#pragma once

#include <ferry/backends/ucx/peer_watch.h>
#include <ferry/backends/ucx/ucx_cma.h>

#include <cstddef>
#include <string>

namespace ferry::detail {

inline constexpr size_t kMaxUcxHostBytes = 255;
inline constexpr size_t kMaxUcxAddressBytes = 64 * 1024;

struct UcxPeerBlob {
  std::string host;  // to count the ranks sharing a host (how long waiters poll)
  ProcessId process; // watched by local peers (peer_watch.h)
  CmaToken token;    // checked by local peers before they read this rank's memory (ucx_cma.h)
  std::string address;  // the UCP worker address
  // The address of the worker that carries the timeout diagnosis (ucx_transport.cpp), whose
  // queues the data's traffic cannot hold up.
  std::string side_address;
};

// `host` longer than kMaxUcxHostBytes is cut.
std::string encode_ucx_peer_blob(const UcxPeerBlob& blob);
// Throws TransportError naming this `rank` and the peer `from` when the blob is malformed.
UcxPeerBlob decode_ucx_peer_blob(const std::string& blob, int rank, int from);

}  // namespace ferry::detail
