// Rank 0's side of the TCP rendezvous: taking every rank's Hello without letting anyone who can
// reach the port stall the job (internal).
//
// Why: the port is open to whoever can connect (see "Who may connect" in docs/transports.md).
// Serving connections one at a time, each allowed a few seconds to speak, let a dozen silent
// connections use up a 30 s deadline before the real ranks were even read. Here every pending
// connection is read as its bytes arrive, all of them in one poll() loop, so the real ranks'
// Hellos (sent the moment they connect) are taken however many others sit there:
//  - each pending connection has its own hello deadline (kHelloWait from its accept, never past
//    the job's), after which it is rejected and closed;
//  - at most kMaxPending connections wait at once; one more evicts the one that has waited
//    longest (a real rank has spoken within microseconds of connecting, a silent one has not);
//  - a wrong secret, garbage, a duplicate rank: rejected as before, the rest go on.
// Nothing a client does consumes the job's deadline beyond its own bytes.
#pragma once

#include <ferry/backends/rendezvous/socket_io.h>

#include <chrono>
#include <string>
#include <vector>

namespace ferry::detail {

inline constexpr auto kHelloWait = std::chrono::seconds(5);
inline constexpr size_t kMaxPending = 64;
// Rejections printed on stderr, one line each; the rest are counted in one line at the end. A
// port scanner or a misconfigured job can send thousands, and rank 0's log is also where the
// job's own errors go. Every reason stays in HelloOutcome::rejected.
inline constexpr size_t kMaxRejectLines = 10;

struct HelloOutcome {
  std::vector<Socket> conns;         // by rank (rank 0's entry stays invalid)
  std::vector<std::string> blobs;    // by rank; blobs[0] is rank 0's own
  std::vector<std::string> rejected; // why each rejected connection was refused
  bool complete = false;             // every rank said hello before the deadline
};

// Accepts on `listener` until every rank 1..world-1 has sent a valid Hello carrying `secret`,
// or until `deadline`. Rejections are listed in the outcome; the first kMaxRejectLines are
// printed on stderr as they happen, then "... and N more rejected connections" once on return.
HelloOutcome collect_hellos(const Socket& listener, uint32_t world, const std::string& secret,
                            const std::string& own_blob, Clock::time_point deadline,
                            std::chrono::milliseconds hello_wait = kHelloWait,
                            size_t max_pending = kMaxPending);

}  // namespace ferry::detail
