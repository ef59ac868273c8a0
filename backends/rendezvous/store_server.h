// Rank 0's side of the key-value store (store.h): one thread that serves every client connection
// from one poll() loop (internal).
//
// Why one thread and poll(): a get() or wait() that waits for a key must not hold a thread, and
// the 2-core machine has none to spare; a parked request is just an entry with a deadline, answered
// when a set()/add() makes its keys exist or when its deadline passes, whichever comes first. The
// loop sleeps in poll() until a socket is ready, the nearest deadline, or the destructor's wake-up
// byte: no busy spinning, and the destructor returns at once whatever the clients are doing
// (their calls then fail with TransportError, never hang).
//
// A connection must send its hello with the job's secret within kHelloWait of connecting; at most
// kMaxPending connections may be waiting to say it (one more evicts the oldest), as in the
// rendezvous (hello_server.h), so a port scanner cannot stall or exhaust the server. Refused
// connections (wrong secret, a malformed or oversized request) and silent ones closed (evicted,
// or no hello in time) are named on stderr for the first kMaxRejectLines of each kind only; one
// line says so when the cap is passed, and the rest of each are counted in one line at most
// every minute while they go on, and when the server stops.
#pragma once

#include <ferry/backends/rendezvous/socket_io.h>

#include <string>
#include <thread>

namespace ferry::detail {

class StoreServer {
 public:
  // Listens on bind:port (port 0: any free port, see port()) and starts serving. Throws
  // TransportError when it cannot listen.
  StoreServer(const std::string& bind, int port, std::string secret);
  // Stops the thread and closes every connection; returns promptly.
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const { return port_; }

 private:
  void run();

  Socket listener_;
  int port_ = 0;
  std::string secret_;
  Socket wake_read_, wake_write_;  // a pipe: the destructor's byte ends the loop
  std::thread thread_;
};

}  // namespace ferry::detail
