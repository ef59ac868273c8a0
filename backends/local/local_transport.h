// The `local` transport: N ranks as threads of one process, for fast deterministic tests.
//
// Matching follows the transport contract (source, tag, posting order). The receiving rank
// copies the payload straight from the sender's buffer into its own: one copy per message, no
// staging, and each rank pulls its own incoming data so that both directions of an exchange
// are copied at the same time. Waiting spins briefly, then sleeps on a condition variable.
#pragma once

#include <ferry/backends/transport.h>

#include <memory>
#include <string>
#include <vector>

namespace ferry {

namespace detail {
class LocalWorld;
}

// Creates the transports of an n-rank local world; element r is rank r's.
std::vector<std::shared_ptr<Transport>> make_local_world(int n);

// Declares `rank` of a local world dead (as if its process had died): every pending and later
// request that involves it fails with PeerFailure carrying `why`.
void fail_local_rank(Transport& any_rank_of_world, int rank, const std::string& why);

// Declares that `rank` of a local world has ended normally (its thread returned, having finished
// its own ops): it sends and receives nothing more, so every pending and later request that
// involves it fails at once with PeerFailure saying so, instead of waiting for a deadline. A
// peer's op that still needs it is one it never took part in. `how` says how it ended.
void end_local_rank(Transport& any_rank_of_world, int rank, const std::string& how);

}  // namespace ferry
