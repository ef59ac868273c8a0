#include <ferry/backends/rendezvous/socket_io.h>

#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace ferry::detail {
namespace {

std::string errno_str(int e) { return str(std::strerror(e), " (errno ", e, ")"); }

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count() + 1, 0, 1000));
}

void set_nonblocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

// Waits for `events` on fd until the deadline; false on expiry.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    if (Clock::now() >= deadline) return false;
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, ms_left(deadline));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // let the next call report the error
  }
}

addrinfo* resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  FERRY_CHECK(rc == 0 && res != nullptr, TransportError, "rendezvous: cannot resolve '", host,
              ":", port, "': ", gai_strerror(rc));
  return res;
}

std::string address_of(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  }
  return str(host, ":", port);
}

}  // namespace

Socket::~Socket() {
  if (fd_ >= 0) ::close(fd_);
}

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

namespace {

int port_of(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

// The listening socket the launcher passed down (FERRY_RENDEZVOUS_FD), when it is on `port`:
// a copy of it, so that the inherited one keeps the port for whoever listens next in this
// process (the TCP rendezvous, then a Store).
Socket inherited_listener(int port) {
  const int fd = config().rendezvous_fd;
  if (fd < 0 || port == 0) return Socket();
  int listening = 0;
  socklen_t len = sizeof listening;
  const bool ok = getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0;
  FERRY_CHECK(ok && listening == 1, InvalidArgument, "rendezvous: FERRY_RENDEZVOUS_FD=", fd,
              ": expected a listening socket inherited from the launcher (ferry-run passes one to "
              "rank 0), given ", ok ? "a socket that is not listening" : "no socket: " +
              errno_str(errno));
  if (port_of(fd) != port) return Socket();  // a rendezvous elsewhere was asked for
  fcntl(fd, F_SETFD, FD_CLOEXEC);  // not passed on to this rank's own children
  Socket copy(fcntl(fd, F_DUPFD_CLOEXEC, 0));
  FERRY_CHECK(copy.valid(), TransportError, "rendezvous: cannot copy FERRY_RENDEZVOUS_FD=", fd,
              ": ", errno_str(errno));
  set_nonblocking(copy.fd());
  return copy;
}

}  // namespace

Socket listen_on(const std::string& host, int port) {
  if (Socket inherited = inherited_listener(port); inherited.valid()) return inherited;
  addrinfo* res = resolve(host, port, true);
  int last = 0;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.valid()) {
      last = errno;
      continue;
    }
    const int one = 1;
    setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(s.fd(), 128) == 0) {
      freeaddrinfo(res);
      set_nonblocking(s.fd());
      return s;
    }
    last = errno;
  }
  freeaddrinfo(res);
  FERRY_THROW(TransportError, "rendezvous: rank 0 cannot listen on ", host, ":", port, ": ",
              errno_str(last), " (is another job using the port? set FERRY_RENDEZVOUS to a free "
              "one)");
}

int bound_port(const Socket& s) { return port_of(s.fd()); }

Socket accept_now(const Socket& listener, std::string& peer) {
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    Socket s(::accept4(listener.fd(), reinterpret_cast<sockaddr*>(&ss), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (s.valid()) {
      peer = address_of(ss);
      const int one = 1;
      setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return s;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Socket();
    FERRY_THROW(TransportError, "rendezvous: accept failed: ", errno_str(errno));
  }
}

Socket accept_until(const Socket& listener, Clock::time_point deadline, std::string& peer) {
  for (;;) {
    if (!wait_for(listener.fd(), POLLIN, deadline)) return Socket();
    Socket s = accept_now(listener, peer);
    if (s.valid()) return s;
  }
}

size_t read_available(const Socket& s, void* data, size_t bytes, const std::string& who) {
  for (;;) {
    const ssize_t n = ::recv(s.fd(), data, bytes, 0);
    if (n > 0) return static_cast<size_t>(n);
    FERRY_CHECK(n != 0 || bytes == 0, TransportError, "rendezvous: ", who,
                " closed the connection early (", bytes, " more bytes expected)");
    if (n == 0) return 0;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    FERRY_THROW(TransportError, "rendezvous: reading from ", who, " failed: ", errno_str(errno));
  }
}

Socket connect_until(const std::string& host, int port, Clock::time_point deadline) {
  auto backoff = std::chrono::milliseconds(5);
  std::string last = "no address";
  for (;;) {
    addrinfo* res = resolve(host, port, false);
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
      Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        a->ai_protocol));
      if (!s.valid()) continue;
      int rc = ::connect(s.fd(), a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        if (!wait_for(s.fd(), POLLOUT, deadline)) break;
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      }
      if (rc == 0) {
        freeaddrinfo(res);
        const int one = 1;
        setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return s;
      }
      last = errno_str(errno);
    }
    freeaddrinfo(res);
    if (Clock::now() + backoff >= deadline)
      FERRY_THROW(TimeoutError, "rendezvous: cannot connect to rank 0 at ", host, ":", port,
                  " before the deadline: ", last);
    std::this_thread::sleep_for(backoff);  // rank 0 may not listen yet
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
}

void write_all(const Socket& s, const void* data, size_t bytes, Clock::time_point deadline,
               const std::string& who) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::send(s.fd(), p, bytes, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      FERRY_THROW(TransportError, "rendezvous: writing to ", who, " failed: ", errno_str(errno));
    FERRY_CHECK(wait_for(s.fd(), POLLOUT, deadline), TimeoutError, "rendezvous: ", who,
                " did not take our data before the deadline");
  }
}

void read_exact(const Socket& s, void* data, size_t bytes, Clock::time_point deadline,
                const std::string& who) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::recv(s.fd(), p, bytes, 0);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    FERRY_CHECK(n != 0, TransportError, "rendezvous: ", who, " closed the connection early (",
                bytes, " more bytes expected)");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      FERRY_THROW(TransportError, "rendezvous: reading from ", who, " failed: ", errno_str(errno));
    FERRY_CHECK(wait_for(s.fd(), POLLIN, deadline), TimeoutError, "rendezvous: ", who,
                " sent nothing more before the deadline (", bytes, " bytes missing)");
  }
}

}  // namespace ferry::detail
