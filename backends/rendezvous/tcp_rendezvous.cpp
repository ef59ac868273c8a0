#include <ferry/backends/rendezvous/tcp_rendezvous.h>

#include <ferry/backends/rendezvous/hello_server.h>
#include <ferry/backends/rendezvous/launch_env.h>
#include <ferry/backends/rendezvous/rendezvous_frame.h>
#include <ferry/backends/rendezvous/socket_io.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>

namespace ferry {
namespace detail {
namespace {

int int_in(const char* name, const std::string& v, int lo, int hi) {
  FERRY_CHECK(!v.empty(), InvalidArgument, name, " must be set for the TCP rendezvous");
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  FERRY_CHECK(end != v.c_str() && *end == '\0' && x >= lo && x <= hi, InvalidArgument, name,
              ": expected an integer in [", lo, ", ", hi, "], given '", v, "'");
  return static_cast<int>(x);
}

// Sends a frame (encode_frame); `secret` may be empty.
void send_frame(const Socket& s, FrameType type, uint32_t seq, uint32_t rank, uint32_t world,
                const std::string& secret, const std::string& payload,
                Clock::time_point deadline, const std::string& who) {
  const std::string frame = encode_frame(type, seq, rank, world, secret, payload);
  write_all(s, frame.data(), frame.size(), deadline, who);
}

// A frame whose header was validated; its secret is compared before the payload is read.
struct Frame {
  FrameHeader header;
  std::string payload;
};

// Reads one frame; nullopt with `error` set when it is invalid or carries the wrong secret.
// Every type must carry `secret` except Reject (a rank rejected for a wrong secret must still
// learn why); the secret is compared before the payload is read.
std::optional<Frame> read_frame(const Socket& s, const FrameExpectation& want,
                                const std::string& secret, Clock::time_point deadline,
                                const std::string& who, std::string& error) {
  unsigned char raw[kFrameHeaderBytes];
  read_exact(s, raw, sizeof raw, deadline, who);
  std::optional<FrameHeader> h = decode_header(raw, want, error);
  if (!h) return std::nullopt;
  std::string theirs(h->secret_bytes, '\0');
  read_exact(s, theirs.data(), theirs.size(), deadline, who);
  if (h->type != FrameType::Reject && !constant_time_equal(theirs, secret)) {
    error = "wrong secret (FERRY_SECRET differs)";
    return std::nullopt;
  }
  Frame f{*h, std::string(h->payload_bytes, '\0')};
  read_exact(s, f.payload.data(), f.payload.size(), deadline, who);
  return f;
}

RendezvousResult serve(const RendezvousOptions& o, const std::string& blob,
                       Clock::time_point deadline) {
  Socket listener = listen_on(o.bind, o.port);
  if (o.on_listening) o.on_listening(bound_port(listener));
  FERRY_LOG(Info, "init", "rendezvous: rank 0 listening on ", o.bind, ":", bound_port(listener),
            " for ", o.size - 1, " ranks");
  const uint32_t world = static_cast<uint32_t>(o.size);
  HelloOutcome hellos = collect_hellos(listener, world, o.secret, blob, deadline);
  RendezvousResult result;
  result.blobs = std::move(hellos.blobs);
  result.rejected = std::move(hellos.rejected);
  std::vector<Socket>& conns = hellos.conns;
  if (!hellos.complete) {
    std::string missing;
    for (int r = 1; r < o.size; ++r)
      if (!conns[r].valid()) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    std::string msg = str("rendezvous: rank 0 timed out after ", o.timeout.count(),
                          " ms waiting for rank(s) ", missing, " to connect");
    for (const std::string& r : result.rejected) msg.append("; rejected ").append(r);
    FERRY_THROW(TimeoutError, msg);
  }
  const std::string table = encode_table(result.blobs);
  // Every rank gets the table even if one of them has died since it said hello: the others
  // would otherwise wait for it until their deadline. The failures are reported together.
  std::string failures;
  for (int r = 1; r < o.size; ++r) {
    try {
      send_frame(conns[r], FrameType::Table, 1, 0, world, o.secret, table, deadline,
                 str("rank ", r));
    } catch (const std::exception& e) {
      failures.append(failures.empty() ? "" : "; ").append(e.what());
    }
  }
  FERRY_CHECK(failures.empty(), PeerFailure, "rendezvous: rank 0 could not send the address "
              "table to every rank: ", failures);
  return result;
}

RendezvousResult join(const RendezvousOptions& o, const std::string& blob,
                      Clock::time_point deadline) {
  const std::string who = str("rank 0 at ", o.host, ":", o.port);
  Socket s = connect_until(o.host, o.port, deadline);
  const uint32_t world = static_cast<uint32_t>(o.size);
  send_frame(s, FrameType::Hello, 0, static_cast<uint32_t>(o.rank), world, o.secret, blob,
             deadline, who);
  std::string error;
  std::optional<Frame> f = read_frame(
      s, FrameExpectation{{FrameType::Table, FrameType::Reject}, 1, world, false}, o.secret,
      deadline, who, error);
  FERRY_CHECK(f.has_value(), TransportError, "rendezvous on rank ", o.rank, ": ", who,
              " sent an invalid answer: ", error);
  FERRY_CHECK(f->header.type != FrameType::Reject, TransportError, "rendezvous on rank ", o.rank,
              ": ", who, " rejected this rank: ", f->payload);
  std::optional<std::vector<std::string>> blobs = decode_table(f->payload, world, error);
  FERRY_CHECK(blobs.has_value(), TransportError, "rendezvous on rank ", o.rank, ": ", who,
              " sent an invalid address table: ", error);
  FERRY_CHECK((*blobs)[o.rank] == blob, TransportError, "rendezvous on rank ", o.rank, ": ", who,
              " sent a table whose entry for this rank is not what this rank published");
  return RendezvousResult{std::move(*blobs), {}};
}

}  // namespace
}  // namespace detail

RendezvousOptions rendezvous_options_from_env() { return rendezvous_options({}); }

RendezvousOptions rendezvous_options(const RendezvousOverrides& given) {
  const Config& c = config();
  const LaunchEnvironment launch = launch_environment();
  RendezvousOptions o;
  // The address: given, else FERRY_RENDEZVOUS, else the launcher's (torchrun's MASTER_ADDR /
  // MASTER_PORT, SLURM's first node).
  const std::string where = !given.address.empty() ? given.address : c.rendezvous;
  const char* source = !given.address.empty() ? "InitOptions::rendezvous" : "FERRY_RENDEZVOUS";
  if (!where.empty() || launch.host.empty() || launch.port == 0) {
    FERRY_CHECK(!where.empty(), InvalidArgument,
                "the TCP rendezvous needs rank 0's address: FERRY_RENDEZVOUS=host:port, or "
                "MASTER_ADDR and MASTER_PORT (torchrun, srun), or InitOptions::rendezvous; ",
                launch.describe());
    const size_t colon = where.rfind(':');
    FERRY_CHECK(colon != std::string::npos && colon > 0, InvalidArgument, source,
                ": expected host:port (where rank 0 listens), given '", where, "'");
    o.host = where.substr(0, colon);
    if (o.host.size() > 2 && o.host.front() == '[' && o.host.back() == ']')
      o.host = o.host.substr(1, o.host.size() - 2);  // [::1]:port
    const std::string port = where.substr(colon + 1);
    char* end = nullptr;
    const long p = std::strtol(port.c_str(), &end, 10);
    FERRY_CHECK(end != port.c_str() && *end == '\0' && p > 0 && p < 65536, InvalidArgument,
                source, ": expected a port in [1, 65535] after the colon, given '", where, "'");
    o.port = static_cast<int>(p);
  } else {
    o.host = launch.host;
    o.port = launch.port;
  }
  const int max_world = static_cast<int>(detail::kMaxRendezvousWorld);
  if (given.size > 0) {
    FERRY_CHECK(given.size <= max_world, InvalidArgument, "InitOptions::world_size: expected 1 "
                "to ", max_world, ", given ", given.size);
    o.size = given.size;
  } else if (!c.world_size.empty() || launch.launcher.empty() || launch.launcher == "mpi") {
    o.size = detail::int_in("FERRY_WORLD_SIZE", c.world_size, 1, max_world);
  } else {
    o.size = launch.world_size;
  }
  if (given.rank >= 0) {
    FERRY_CHECK(given.rank < o.size, InvalidArgument, "InitOptions::rank: expected 0 to ",
                o.size - 1, " (below the world size), given ", given.rank);
    o.rank = given.rank;
  } else if (!c.rank.empty() || launch.launcher.empty() || launch.launcher == "mpi") {
    o.rank = detail::int_in("FERRY_RANK", c.rank, 0, o.size - 1);
  } else {
    FERRY_CHECK(launch.rank < o.size, InvalidArgument, launch.launcher, "'s rank ", launch.rank,
                " is not below the world size ", o.size);
    o.rank = launch.rank;
  }
  o.secret = !given.secret.empty() ? given.secret : c.secret;
  FERRY_CHECK(!o.secret.empty() && o.secret.size() <= detail::kMaxSecretBytes, InvalidArgument,
              "FERRY_SECRET (or InitOptions::secret) must be set to the job's secret (1 to ",
              detail::kMaxSecretBytes, " bytes, the same on every rank), given ",
              o.secret.size(), " bytes");
  if (!given.bind.empty())
    o.bind = given.bind;
  else if (!c.rendezvous_bind.empty())
    o.bind = c.rendezvous_bind;
  o.timeout = default_timeout();
  return o;
}

RendezvousResult tcp_rendezvous(const RendezvousOptions& o, const std::string& blob) {
  FERRY_CHECK(o.size >= 1 && o.rank >= 0 && o.rank < o.size, InvalidArgument,
              "tcp_rendezvous: rank must be in [0, size), given rank ", o.rank, " of ", o.size);
  FERRY_CHECK(blob.size() <= detail::kMaxBlobBytes, InvalidArgument, "tcp_rendezvous: at most ",
              detail::kMaxBlobBytes, " bytes per rank, given ", blob.size());
  FERRY_CHECK(!o.secret.empty() && o.secret.size() <= detail::kMaxSecretBytes, InvalidArgument,
              "tcp_rendezvous: the secret must have 1 to ", detail::kMaxSecretBytes,
              " bytes, given ", o.secret.size());
  if (o.size == 1) return RendezvousResult{{blob}, {}};
  const auto deadline = Clock::now() + o.timeout;
  return o.rank == 0 ? detail::serve(o, blob, deadline) : detail::join(o, blob, deadline);
}

}  // namespace ferry
