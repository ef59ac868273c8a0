// The TCP rendezvous: an all-gather of one small blob per rank (the UCX worker addresses)
// without MPI, through rank 0.
//
// Environment (rendezvous_options_from_env):
//   FERRY_RENDEZVOUS=host:port  where rank 0 listens and the other ranks connect
//   FERRY_RANK, FERRY_WORLD_SIZE  this process's rank and the number of ranks
//   FERRY_SECRET                a per-job secret, the same on every rank (at most 256 bytes)
//   FERRY_RENDEZVOUS_BIND       the address rank 0 binds (default 127.0.0.1: only processes of
//                               this host can connect; set 0.0.0.0 or an interface's address
//                               for a job that spans hosts)
//
// Rank r > 0 connects (retrying while rank 0 is not listening yet) and sends a Hello with its
// rank, the world size, the secret and its blob. Rank 0 validates each Hello (see
// rendezvous_frame.h), compares the secret before it reads the blob, and answers with the
// table of all blobs once every rank has said hello; the table carries the secret too, and
// each rank checks it before accepting any address. A connection that sends garbage, a wrong
// secret, a wrong world size, a rank out of range or a rank already seen gets a Reject frame
// (if it is still listening) and is closed; rank 0 reports it on stderr, naming the peer's
// address, and keeps waiting for the real ranks. Every socket operation has a deadline, and
// rank 0 reads all pending connections at once, each under its own hello deadline
// (hello_server.h), so silent connections cannot hold the real ranks up.
#pragma once

#include <ferry/backends/transport.h>

#include <functional>
#include <string>
#include <vector>

namespace ferry {

struct RendezvousOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // rank 0 may use 0 (any free port; see on_listening)
  std::string bind = "127.0.0.1";
  int rank = 0;
  int size = 1;
  std::string secret;
  std::chrono::milliseconds timeout{300'000};
  // Rank 0 calls it with the port it listens on, before accepting (tests use port 0).
  std::function<void(int port)> on_listening;
};

struct RendezvousResult {
  std::vector<std::string> blobs;  // indexed by rank
  std::vector<std::string> rejected;  // rank 0: why each rejected connection was refused
};

// What ferry::init(InitOptions) says about the rendezvous; an empty or negative field is taken
// from the environment instead.
struct RendezvousOverrides {
  std::string address;  // host:port
  int rank = -1;
  int size = -1;
  std::string secret;
  std::string bind;
};

// Reads the variables above (timeout: FERRY_TIMEOUT); where FERRY_RENDEZVOUS, FERRY_RANK or
// FERRY_WORLD_SIZE is unset, what torchrun or SLURM set instead (launch_env.h). Throws
// InvalidArgument naming a missing or malformed variable.
RendezvousOptions rendezvous_options_from_env();
// The same with `given` taking precedence over the environment.
RendezvousOptions rendezvous_options(const RendezvousOverrides& given);

// Collective over the job's ranks. Throws TransportError (a peer sent something invalid, or
// rank 0 rejected us: the message names who and why) or TimeoutError (ranks missing at the
// deadline: rank 0 names them and lists the rejected connections).
RendezvousResult tcp_rendezvous(const RendezvousOptions& options, const std::string& blob);

}  // namespace ferry
