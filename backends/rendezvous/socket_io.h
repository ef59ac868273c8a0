// Blocking-style TCP helpers where every operation has a deadline (internal).
//
// Sockets are non-blocking underneath and every wait is a poll() bounded by the deadline, so a
// peer that stops talking (or a port scanner that connects and says nothing) costs at most the
// time left, never a hang. Failures throw TransportError / TimeoutError naming `who`.
#pragma once

#include <ferry/backends/transport.h>

#include <cstddef>
#include <string>

namespace ferry::detail {

// Owns a file descriptor.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket();
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Listens on host:port (port 0: any free port; see bound_port). When the launcher passed
// down a socket listening on that port (FERRY_RENDEZVOUS_FD: ferry-run does for rank 0), a copy
// of it is returned instead: the launcher bound the port before starting the ranks, so no
// other process could take it meanwhile.
Socket listen_on(const std::string& host, int port);
int bound_port(const Socket& s);
// Accepts one connection, or returns an invalid Socket when `deadline` passes first.
// `peer` receives "address:port" of the connecting side.
Socket accept_until(const Socket& listener, Clock::time_point deadline, std::string& peer);
// Accepts one connection that is already waiting, or returns an invalid Socket.
Socket accept_now(const Socket& listener, std::string& peer);
// Reads at most `bytes` of what has arrived, without waiting; 0 when nothing has. Throws
// TransportError when the peer closed the connection (or it broke).
size_t read_available(const Socket& s, void* data, size_t bytes, const std::string& who);
// Connects to host:port, retrying while nobody listens yet (the server may start later).
Socket connect_until(const std::string& host, int port, Clock::time_point deadline);

void write_all(const Socket& s, const void* data, size_t bytes, Clock::time_point deadline,
               const std::string& who);
void read_exact(const Socket& s, void* data, size_t bytes, Clock::time_point deadline,
                const std::string& who);

}  // namespace ferry::detail
