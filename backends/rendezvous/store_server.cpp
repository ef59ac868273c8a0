#include <ferry/backends/rendezvous/store_server.h>

#include <ferry/backends/rendezvous/hello_server.h>
#include <ferry/backends/rendezvous/rendezvous_frame.h>
#include <ferry/backends/rendezvous/store_protocol.h>
#include <ferry/runtime/error.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <list>
#include <map>
#include <optional>

namespace ferry::detail {
namespace {

constexpr auto kRejectCountEvery = std::chrono::seconds(60);

struct Conn {
  Socket socket;
  std::string peer;
  Clock::time_point accepted;
  bool said_hello = false;
  std::string in;           // received, not yet taken
  std::string out;          // to send
  size_t out_at = 0;
  bool close_after_send = false;
  std::optional<StoreRequest> parked;  // a get() or wait() waiting for its keys
  Clock::time_point parked_until;
};

// Keys shown in messages: at most 80 bytes each.
std::string shown(const std::string& key) {
  return "'" + (key.size() <= 80 ? key : key.substr(0, 77) + "...") + "'";
}

std::optional<int64_t> as_integer(const std::string& v) {
  int64_t x = 0;
  const char* end = v.data() + v.size();
  const auto [p, ec] = std::from_chars(v.data(), end, x);
  if (ec != std::errc() || p != end || v.empty()) return std::nullopt;
  return x;
}

// The lines of one kind of rejected connection. The server runs for the whole job, so a flood
// (a port scanner, another job's clients with their own secret) must not bury the job's own
// messages: the first kMaxRejectLines are printed, then one line says that the rest are only
// counted; their count follows at most every kRejectCountEvery while they go on (a job that
// runs for days learns of a flood while it lasts), and once more when the server stops.
class CappedLines {
 public:
  // `noun` ("refused connection"), what follows it ("", " closed") and what the count line's
  // parenthesis starts with.
  CappedLines(const char* noun, const char* verb, const char* why)
      : noun_(noun), verb_(verb), why_(why) {}
  CappedLines(const CappedLines&) = delete;
  CappedLines& operator=(const CappedLines&) = delete;
  // However the loop ended.
  ~CappedLines() {
    if (count_ > kMaxRejectLines) print_count("");
  }

  void add(const std::string& line) {
    ++count_;
    if (count_ <= kMaxRejectLines) {
      std::fprintf(stderr, "ferry: store server %s\n", line.c_str());
    } else if (count_ == kMaxRejectLines + 1) {
      std::fprintf(stderr,
                   "ferry: store server: more than %zu %ss%s; the rest are counted, not shown "
                   "(a count every %lld s while they go on, and when the server stops)\n",
                   kMaxRejectLines, noun_, verb_,
                   static_cast<long long>(kRejectCountEvery.count()));
      last_count_ = Clock::now();
    } else if (Clock::now() >= last_count_ + kRejectCountEvery) {
      print_count(" so far");
      last_count_ = Clock::now();
    }
  }

 private:
  void print_count(const char* when) {
    const size_t more = count_ - kMaxRejectLines;
    std::fprintf(stderr, "ferry: store server: ... and %zu more %s%s%s%s (%sonly the first %zu are "
                 "shown)\n", more, noun_, more == 1 ? "" : "s", verb_, when, why_,
                 kMaxRejectLines);
  }

  const char* noun_;
  const char* verb_;
  const char* why_;
  size_t count_ = 0;
  Clock::time_point last_count_{};
};

class Loop {
 public:
  Loop(const Socket& listener, const std::string& secret, const Socket& wake)
      : listener_(listener), secret_(secret), wake_(wake) {}
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;
  void run() {
    for (;;) {
      std::vector<pollfd> fds{{wake_.fd(), POLLIN, 0}, {listener_.fd(), POLLIN, 0}};
      std::vector<Conn*> order;
      for (Conn& c : conns_) {
        short events = 0;
        // A parked connection is only watched for its end: its client sends nothing more.
        if (c.out_at < c.out.size()) events |= POLLOUT;
        else if (!c.close_after_send) events |= c.parked ? POLLRDHUP : POLLIN;
        fds.push_back({c.socket.fd(), events, 0});
        order.push_back(&c);
      }
      const int n = poll(fds.data(), fds.size(), wait_ms());
      if (n < 0 && errno != EINTR)
        FERRY_THROW(TransportError, "store server: poll failed (errno ", errno, ")");
      if (n > 0 && fds[0].revents != 0) return;  // the destructor's byte
      for (size_t i = 0; n > 0 && i < order.size(); ++i)
        if (fds[i + 2].revents != 0) serve(*order[i], fds[i + 2].revents);
      if (n > 0 && fds[1].revents != 0) accept_all();
      expire();
      conns_.remove_if([](const Conn& c) { return !c.socket.valid(); });
    }
  }

 private:
  // Until the nearest deadline (hello or parked request); -1 when there is none.
  int wait_ms() const {
    std::optional<Clock::time_point> next;
    for (const Conn& c : conns_) {
      if (!c.said_hello) next = std::min(next.value_or(c.accepted + kHelloWait),
                                         c.accepted + kHelloWait);
      if (c.parked) next = std::min(next.value_or(c.parked_until), c.parked_until);
    }
    if (!next) return -1;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now());
    return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 60'000));
  }

  void accept_all() {
    for (;;) {
      std::string peer;
      Socket s = accept_now(listener_, peer);
      if (!s.valid()) return;
      size_t pending = 0;
      for (const Conn& c : conns_) pending += c.said_hello ? 0 : 1;
      if (pending >= kMaxPending) {
        // The oldest silent one goes: a real client speaks within microseconds.
        for (Conn& c : conns_)
          if (!c.said_hello && c.socket.valid()) {
            drop(c, "evicted a silent connection from " + c.peer);
            break;
          }
      }
      Conn& c = conns_.emplace_back();
      c.socket = std::move(s);
      c.peer = peer;
      c.accepted = Clock::now();
    }
  }

  void expire() {
    const auto now = Clock::now();
    for (Conn& c : conns_) {
      if (!c.socket.valid()) continue;
      if (!c.said_hello && now >= c.accepted + kHelloWait) {
        drop(c, str("closed a connection from ", c.peer, " that sent no hello within ",
                    std::chrono::duration_cast<std::chrono::milliseconds>(kHelloWait).count(),
                    " ms"));
      } else if (c.parked && now >= c.parked_until) {
        std::string missing;
        for (const std::string& k : c.parked->keys)
          if (!data_.count(k)) missing += (missing.empty() ? "" : ", ") + shown(k);
        c.parked.reset();
        respond(c, StoreStatus::Timeout, missing);
      }
    }
  }

  void serve(Conn& c, short revents) {
    if (!c.socket.valid()) return;  // closed earlier in this round (answered, then ended)
    try {
      if (revents & POLLOUT) flush(c);
      if (c.parked && (revents & (POLLRDHUP | POLLHUP | POLLERR))) {
        c.socket = Socket();  // its client went away while waiting
        return;
      }
      if (revents & (POLLIN | POLLHUP | POLLERR)) {
        char chunk[64 * 1024];
        const size_t got = read_available(c.socket, chunk, sizeof chunk, "store client");
        c.in.append(chunk, got);
        take(c);
      }
    } catch (const Error&) {
      c.socket = Socket();  // it closed or broke: nothing to answer
    }
  }

  void flush(Conn& c) {
    while (c.out_at < c.out.size()) {
      const ssize_t n = ::send(c.socket.fd(), c.out.data() + c.out_at, c.out.size() - c.out_at,
                               MSG_NOSIGNAL);
      if (n > 0) {
        c.out_at += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n < 0 && errno == EINTR) continue;
      c.socket = Socket();
      return;
    }
    c.out.clear();
    c.out_at = 0;
    if (c.close_after_send) c.socket = Socket();
    else take(c);  // anything that arrived while the answer went out
  }

  void respond(Conn& c, StoreStatus status, const std::string& payload) {
    c.out += encode_store_response(status, payload);
    flush(c);
  }

  // Closes a connection that never said hello (a port scanner makes exactly these), naming it
  // within the cap of `dropped_`.
  void drop(Conn& c, const std::string& what) {
    dropped_.add(what);
    c.socket = Socket();
  }

  // Answers a refused connection with its error and closes it, naming it within the cap of
  // `refused_`.
  void refuse(Conn& c, const std::string& why) {
    refused_.add(str("refused ", c.peer, ": ", why));
    c.close_after_send = true;
    respond(c, StoreStatus::Error, why);
  }

  // Takes the hello, then whole requests, from what has arrived.
  void take(Conn& c) {
    while (c.socket.valid() && !c.parked && !c.close_after_send && c.out.empty()) {
      if (!c.said_hello) {
        if (c.in.size() < kStoreHelloBytes) return;
        uint32_t secret_bytes = 0;
        std::string error;
        const auto* raw = reinterpret_cast<const unsigned char*>(c.in.data());
        if (!decode_store_hello(raw, secret_bytes, error)) return refuse(c, error);
        if (c.in.size() < kStoreHelloBytes + secret_bytes) return;
        if (!constant_time_equal(c.in.substr(kStoreHelloBytes, secret_bytes), secret_))
          return refuse(c, "wrong secret (FERRY_SECRET differs)");
        c.in.erase(0, kStoreHelloBytes + secret_bytes);
        c.said_hello = true;
        respond(c, StoreStatus::Ok, "");
        continue;
      }
      if (c.in.size() < 4) return;
      const uint32_t len = decode_u32(reinterpret_cast<const unsigned char*>(c.in.data()));
      if (len == 0 || len > kStoreMaxBodyBytes)
        return refuse(c, str("a request of ", len, " bytes (at most ", kStoreMaxBodyBytes, ")"));
      if (c.in.size() < 4 + size_t{len}) return;
      std::string error;
      std::optional<StoreRequest> r = decode_store_request(c.in.substr(4, len), error);
      c.in.erase(0, 4 + size_t{len});
      if (!r) return refuse(c, error);
      handle(c, std::move(*r));
    }
  }

  bool all_set(const StoreRequest& r) const {
    return std::all_of(r.keys.begin(), r.keys.end(),
                       [&](const std::string& k) { return data_.count(k) != 0; });
  }

  void handle(Conn& c, StoreRequest r) {
    const bool one_key = r.keys.size() == 1;
    switch (r.op) {
      case StoreOp::Set:
      case StoreOp::Add:
      case StoreOp::Get:
      case StoreOp::Delete:
        if (!one_key) return refuse(c, str(store_op_name(r.op), " takes one key"));
        break;
      case StoreOp::NumKeys:
        break;
      default:
        if (r.keys.empty()) return refuse(c, str(store_op_name(r.op), " takes keys"));
    }
    switch (r.op) {
      case StoreOp::Set:
        data_[r.keys[0]] = std::move(r.value);
        respond(c, StoreStatus::Ok, "");
        return wake_parked();
      case StoreOp::Add: {
        std::string& v = data_[r.keys[0]];
        const std::optional<int64_t> now = v.empty() ? std::optional<int64_t>(0) : as_integer(v);
        if (!now) {
          return respond(c, StoreStatus::Error, str("key ", shown(r.keys[0]), " holds ", v.size(),
                                                    " bytes that are not a decimal integer"));
        }
        int64_t sum = 0;
        if (__builtin_add_overflow(*now, r.arg, &sum))
          return respond(c, StoreStatus::Error, str("key ", shown(r.keys[0]), " holds ", *now,
                                                    ": adding ", r.arg, " overflows int64"));
        v = std::to_string(sum);
        respond(c, StoreStatus::Ok, encode_i64(sum));
        return wake_parked();
      }
      case StoreOp::Get:
      case StoreOp::Wait:
        if (all_set(r)) return answer_parked(c, r);
        if (r.arg <= 0) {
          c.parked = std::move(r);
          c.parked_until = Clock::now();
          return expire();
        }
        c.parked_until = Clock::now() + std::chrono::milliseconds(r.arg);
        c.parked = std::move(r);
        return;
      case StoreOp::Check:
        return respond(c, StoreStatus::Ok, std::string(1, all_set(r) ? '\1' : '\0'));
      case StoreOp::Delete:
        return respond(c, StoreStatus::Ok, std::string(1, data_.erase(r.keys[0]) ? '\1' : '\0'));
      case StoreOp::NumKeys:
        return respond(c, StoreStatus::Ok, encode_i64(static_cast<int64_t>(data_.size())));
      case StoreOp::Hello:
        return refuse(c, "a second hello");
    }
  }

  void answer_parked(Conn& c, const StoreRequest& r) {
    respond(c, StoreStatus::Ok, r.op == StoreOp::Get ? data_.at(r.keys[0]) : std::string());
  }

  void wake_parked() {
    for (Conn& c : conns_) {
      if (!c.socket.valid() || !c.parked || !all_set(*c.parked)) continue;
      const StoreRequest r = std::move(*c.parked);
      c.parked.reset();
      answer_parked(c, r);
    }
  }

  const Socket& listener_;
  const std::string& secret_;
  const Socket& wake_;
  std::list<Conn> conns_;  // a list: serve() holds pointers across accept_all()
  std::map<std::string, std::string> data_;
  // Destroyed in reverse: the refusals' count line comes first.
  CappedLines dropped_{"silent connection", " closed", "evicted, or no hello in time; "};
  CappedLines refused_{"refused connection", "", ""};
};

}  // namespace

StoreServer::StoreServer(const std::string& bind, int port, std::string secret)
    : listener_(listen_on(bind, port)), port_(bound_port(listener_)), secret_(std::move(secret)) {
  int fds[2];
  FERRY_CHECK(::pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0, TransportError,
              "store server: cannot create its wake-up pipe (errno ", errno, ")");
  wake_read_ = Socket(fds[0]);
  wake_write_ = Socket(fds[1]);
  thread_ = std::thread([this] { run(); });
}

StoreServer::~StoreServer() {
  const char byte = 1;
  // A full pipe already holds a byte: the loop wakes either way.
  [[maybe_unused]] const ssize_t n = ::write(wake_write_.fd(), &byte, 1);
  thread_.join();
}

void StoreServer::run() {
  try {
    Loop(listener_, secret_, wake_read_).run();
  } catch (const std::exception& e) {
    // The clients see their connections close and raise TransportError; this says why.
    std::fprintf(stderr, "ferry: the store server on port %d stopped: %s\n", port_, e.what());
  }
}

}  // namespace ferry::detail
