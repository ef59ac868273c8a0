// The two moments every rank of a job meets outside any group's collectives: the end of
// ferry::init() and the start of ferry::finalize() (internal).
//
// Each is a handshake over the transport's own point-to-point: every rank sends a zero-byte
// message to every other rank and waits for one from each. After the Open handshake every pair
// of ranks has exchanged a message, so every connection is wired up (UCX attaches a peer's
// shared memory on the first message, which fails once that peer has ended) and an early exit
// can only be an ordinary peer failure. After the Close handshake every rank knows that no
// peer will send it anything more: a peer that ends from then on has finished, not failed.
#pragma once

#include <ferry/backends/transport.h>

namespace ferry::detail {

enum class Handshake : uint32_t { Open = 0, Close = 1 };

// Until `deadline`. Throws TimeoutError naming the ranks not heard from, or PeerFailure when a
// peer ended (or gave up) before it took part. A send whose peer was heard from may fail (that
// peer may end as soon as it heard from everyone); it is not an error.
void world_handshake(Transport& transport, Handshake which, Clock::time_point deadline);

}  // namespace ferry::detail
