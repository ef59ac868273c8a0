#include <ferry/backends/rendezvous/hello_server.h>

#include <ferry/backends/rendezvous/rendezvous_frame.h>
#include <ferry/runtime/error.h>

#include <poll.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <optional>

namespace ferry::detail {
namespace {

// One accepted connection whose Hello is still being read: the header, then the secret
// (compared before anything else is read), then the payload.
struct Pending {
  Socket socket;
  std::string peer;
  Clock::time_point hello_deadline;
  std::string bytes;       // what arrived of the current part
  size_t want = kFrameHeaderBytes;
  int part = 0;            // 0 header, 1 secret, 2 payload
  FrameHeader header;
};

void reject(Pending& p, const std::string& error, Clock::time_point deadline,
            HelloOutcome& out) {
  const std::string why = str("the peer at ", p.peer, ": ", error);
  if (out.rejected.size() < kMaxRejectLines)
    std::fprintf(stderr, "ferry: rendezvous on rank 0 rejected a connection from %s\n",
                 why.c_str());
  out.rejected.push_back(why);
  try {
    const std::string payload = error.substr(0, kMaxRejectBytes);
    FrameHeader h{FrameType::Reject, 1, 0, p.header.world, 0,
                  static_cast<uint32_t>(payload.size())};
    std::string frame = encode_header(h) + payload;
    write_all(p.socket, frame.data(), frame.size(),
              std::min(deadline, Clock::now() + std::chrono::milliseconds(100)),
              "the peer at " + p.peer);
  } catch (const Error&) {
    // It does not listen; closing says enough.
  }
  p.socket = Socket();
}

// Reads what has arrived; returns an error for a rejection, "" otherwise (sets `done` when the
// Hello is complete).
std::string advance(Pending& p, uint32_t world, const std::string& secret,
                    const std::vector<Socket>& conns, bool& done) {
  const std::string who = "the peer at " + p.peer;
  for (;;) {
    if (p.bytes.size() < p.want) {
      const size_t had = p.bytes.size();
      p.bytes.resize(p.want);
      size_t n = 0;
      try {
        n = read_available(p.socket, p.bytes.data() + had, p.want - had, who);
      } catch (const Error& e) {
        return e.what();  // it closed or broke off: same treatment as garbage
      }
      p.bytes.resize(had + n);
      if (p.bytes.size() < p.want) return "";  // more later
    }
    if (p.part == 0) {
      std::string error;
      std::optional<FrameHeader> h = decode_header(
          reinterpret_cast<const unsigned char*>(p.bytes.data()),
          FrameExpectation{{FrameType::Hello}, 0, world, true}, error);
      if (!h) return error;
      p.header = *h;
      p.part = 1;
      p.want = h->secret_bytes;
    } else if (p.part == 1) {
      if (!constant_time_equal(p.bytes, secret)) return "wrong secret (FERRY_SECRET differs)";
      if (conns[p.header.rank].valid())
        return str("rank ", p.header.rank, " joined already (two processes with FERRY_RANK=",
                   p.header.rank, "?)");
      p.part = 2;
      p.want = p.header.payload_bytes;
    } else {
      done = true;
      return "";
    }
    p.bytes.clear();
    if (p.want == 0 && p.part == 2) {
      done = true;
      return "";
    }
  }
}

// The count of the rejections that reject() did not print, so that a flood is not silent either.
void report_unprinted(const HelloOutcome& out) {
  if (out.rejected.size() <= kMaxRejectLines) return;
  const size_t more = out.rejected.size() - kMaxRejectLines;
  std::fprintf(stderr,
               "ferry: rendezvous on rank 0: ... and %zu more rejected connection%s (only the "
               "first %zu are shown)\n",
               more, more == 1 ? "" : "s", kMaxRejectLines);
}

int poll_ms(Clock::time_point until) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left + 1, 0, 1000));
}

}  // namespace

HelloOutcome collect_hellos(const Socket& listener, uint32_t world, const std::string& secret,
                            const std::string& own_blob, Clock::time_point deadline,
                            std::chrono::milliseconds hello_wait, size_t max_pending) {
  HelloOutcome out;
  out.conns.resize(world);
  out.blobs.assign(world, std::string());
  out.blobs[0] = own_blob;
  uint32_t joined = 1;
  std::deque<Pending> pending;  // oldest first
  std::vector<pollfd> fds;
  while (joined < world) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      report_unprinted(out);
      return out;
    }
    // Expired hellos first: they free their places.
    for (Pending& p : pending)
      if (now >= p.hello_deadline)
        reject(p, str("sent no complete hello within ", hello_wait.count(), " ms"), deadline,
               out);
    std::erase_if(pending, [](const Pending& p) { return !p.socket.valid(); });
    Clock::time_point wake = deadline;
    for (const Pending& p : pending) wake = std::min(wake, p.hello_deadline);
    fds.assign(1, pollfd{listener.fd(), POLLIN, 0});
    for (const Pending& p : pending) fds.push_back(pollfd{p.socket.fd(), POLLIN, 0});
    const int n = ::poll(fds.data(), fds.size(), poll_ms(wake));
    if (n <= 0) continue;  // timeout or EINTR: deadlines are checked above
    // Reading first: a connection evicted below must not be one that already spoke.
    for (size_t i = 0; i < pending.size(); ++i) {
      if (fds[i + 1].revents == 0) continue;
      Pending& p = pending[i];
      bool done = false;
      const std::string error = advance(p, world, secret, out.conns, done);
      if (!error.empty()) {
        reject(p, error, deadline, out);
      } else if (done) {
        const uint32_t r = p.header.rank;
        out.blobs[r] = std::move(p.bytes);
        out.conns[r] = std::move(p.socket);
        ++joined;
      }
    }
    std::erase_if(pending, [](const Pending& p) { return !p.socket.valid(); });
    if (fds[0].revents != 0) {
      for (;;) {
        std::string peer;
        Socket s = accept_now(listener, peer);
        if (!s.valid()) break;
        if (pending.size() >= max_pending) {
          // The one that waited longest without sending a byte (else the oldest).
          auto victim = std::find_if(pending.begin(), pending.end(), [](const Pending& q) {
            return q.part == 0 && q.bytes.empty();
          });
          if (victim == pending.end()) victim = pending.begin();
          reject(*victim,
                 str("evicted: ", max_pending, " connections were waiting to say hello and ",
                     "this one had waited longest"),
                 deadline, out);
          pending.erase(victim);
        }
        const Clock::time_point at = Clock::now();
        Pending p;
        p.socket = std::move(s);
        p.peer = std::move(peer);
        p.hello_deadline = std::min(deadline, at + hello_wait);
        p.header.world = world;
        pending.push_back(std::move(p));
      }
    }
  }
  out.complete = true;
  report_unprinted(out);
  return out;
}

}  // namespace ferry::detail
