#include <ferry/backends/rendezvous/store.h>

#include <ferry/backends/rendezvous/launch_env.h>
#include <ferry/backends/rendezvous/rendezvous_frame.h>
#include <ferry/backends/rendezvous/socket_io.h>
#include <ferry/backends/rendezvous/store_protocol.h>
#include <ferry/backends/rendezvous/store_server.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <cstdlib>
#include <mutex>

namespace ferry {
namespace {

using detail::Socket;
using detail::str;
using detail::StoreOp;
using detail::StoreRequest;
using detail::StoreResponse;
using detail::StoreStatus;

// The server answers a parked get()/wait() at its deadline; the client allows this much more for
// the answer to arrive before it gives up on the server itself.
constexpr auto kAnswerGrace = std::chrono::seconds(5);
// A store that answered before and now refuses connections is gone (rank 0's Store destroyed, or
// its process ended): a new connection is tried this long, not for the whole deadline, which is
// for a server that has not started yet.
constexpr auto kGoneGrace = std::chrono::seconds(1);

// An inner error's text without its "ferry: rendezvous: " prefix, for the op's own message.
std::string inner(const std::exception& e) {
  std::string m = e.what();
  for (const char* prefix : {"ferry: ", "rendezvous: "})
    if (m.rfind(prefix, 0) == 0) m.erase(0, std::char_traits<char>::length(prefix));
  return m;
}

std::string shown(const std::string& key) {
  return "'" + (key.size() <= 80 ? key : key.substr(0, 77) + "...") + "'";
}

// "host:port" or "[v6]:port"; port 0 allowed (rank 0: any free port).
void parse_address(const char* source, const std::string& where, std::string& host, int& port) {
  const size_t colon = where.rfind(':');
  FERRY_CHECK(colon != std::string::npos && colon > 0, InvalidArgument, "ferry::Store: ", source,
              ": expected host:port, given '", where, "'");
  host = where.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  const std::string digits = where.substr(colon + 1);
  char* end = nullptr;
  const long p = std::strtol(digits.c_str(), &end, 10);
  FERRY_CHECK(end != digits.c_str() && *end == '\0' && p >= 0 && p < 65536, InvalidArgument,
              "ferry::Store: ", source, ": expected a port from 0 to 65535 after the colon, "
              "given '", where, "'");
  port = static_cast<int>(p);
}

}  // namespace

struct Store::Impl {
  std::string host;
  int port = 0;
  int rank = 0;
  std::string secret;
  std::chrono::milliseconds timeout{0};
  std::unique_ptr<detail::StoreServer> server;  // rank 0
  std::mutex mu;
  std::vector<Socket> idle;  // connections with no call in flight; destroyed before the server
  bool served = false;       // a connection was accepted once (under mu)

  std::string where() const { return str("the store at ", host, ":", port); }
  std::string who(const char* op) const { return str("ferry::Store::", op, " on rank ", rank); }

  void check_key(const char* op, const std::string& key) const {
    FERRY_CHECK(!key.empty() && key.size() <= detail::kStoreMaxKeyBytes, InvalidArgument,
                who(op), ": keys are 1 to ", detail::kStoreMaxKeyBytes, " bytes, given ",
                key.empty() ? std::string("an empty key") : str("a key of ", key.size(), " bytes"));
  }

  void check_keys(const char* op, const std::vector<std::string>& keys) const {
    FERRY_CHECK(keys.size() <= detail::kStoreMaxKeysPerCall, InvalidArgument, who(op),
                ": at most ", detail::kStoreMaxKeysPerCall, " keys per call, given ", keys.size());
    for (const std::string& k : keys) check_key(op, k);
  }

  void check_wait(const char* op, std::chrono::milliseconds t) const {
    FERRY_CHECK(t.count() > 0, InvalidArgument, who(op), ": the timeout must be positive, given ",
                t.count(), " ms");
  }

  Socket connect(const char* op, Clock::time_point deadline) {
    Socket s = detail::connect_until(host, port, deadline);
    const std::string hello = detail::encode_store_hello(static_cast<uint32_t>(rank), secret);
    detail::write_all(s, hello.data(), hello.size(), deadline, where());
    const StoreResponse r = read_response(s, deadline);
    FERRY_CHECK(r.status == StoreStatus::Ok, TransportError, who(op), ": ", where(),
                " refused this rank: ", r.payload);
    return s;
  }

  StoreResponse read_response(const Socket& s, Clock::time_point deadline) const {
    unsigned char len_bytes[4];
    detail::read_exact(s, len_bytes, 4, deadline, where());
    const uint32_t len = detail::decode_u32(len_bytes);
    FERRY_CHECK(len >= 1 && len <= 1 + detail::kStoreMaxValueBytes, TransportError, where(),
                " sent an answer of ", len, " bytes: not a ferry store");
    std::string body(len, '\0');
    detail::read_exact(s, body.data(), len, deadline, where());
    const auto status = static_cast<uint8_t>(body[0]);
    FERRY_CHECK(status <= static_cast<uint8_t>(StoreStatus::Error), TransportError, where(),
                " sent an unknown status ", static_cast<int>(status));
    return StoreResponse{static_cast<StoreStatus>(status), body.substr(1)};
  }

  // One request on an idle connection (or a new one); `wait` is how long the server may park it.
  StoreResponse call(const char* op, const StoreRequest& request,
                     std::chrono::milliseconds wait = std::chrono::milliseconds(0)) {
    const auto start = Clock::now();
    const auto io_deadline = start + timeout;
    Socket s;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!idle.empty()) {
        s = std::move(idle.back());
        idle.pop_back();
      }
    }
    StoreResponse r;
    bool gone = false;  // connecting again to a store that served this rank before, and failing
    try {
      if (!s.valid()) {
        bool before = false;
        {
          std::lock_guard<std::mutex> lock(mu);
          before = served;
        }
        gone = before;
        s = connect(op, before ? std::min(io_deadline, start + kGoneGrace) : io_deadline);
        gone = false;
        std::lock_guard<std::mutex> lock(mu);
        served = true;
      }
      const std::string bytes = detail::encode_store_request(request);
      detail::write_all(s, bytes.data(), bytes.size(), io_deadline, where());
      r = read_response(s, wait.count() > 0 ? start + wait + kAnswerGrace : io_deadline);
    } catch (const TimeoutError& e) {
      if (gone)
        FERRY_THROW(TransportError, who(op), ": ", where(), " served this rank before and is "
                    "gone (rank 0's Store destroyed, or its process ended): ", inner(e));
      FERRY_THROW(TimeoutError, who(op), ": ", inner(e));
    } catch (const TransportError& e) {
      // The server is gone (rank 0's Store destroyed, or its process ended) or spoke nonsense.
      FERRY_THROW(TransportError, who(op), ": ", inner(e));
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      idle.push_back(std::move(s));
    }
    FERRY_CHECK(r.status != StoreStatus::Error, InvalidArgument, who(op), ": ", r.payload);
    return r;
  }
};

Store::Store(const StoreOptions& o) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  const Config& c = config();
  const LaunchEnvironment launch = launch_environment();
  s.rank = o.rank >= 0 ? o.rank : launch.rank;
  if (!o.address.empty()) {
    parse_address("StoreOptions::address", o.address, s.host, s.port);
  } else if (!c.rendezvous.empty()) {
    parse_address("FERRY_RENDEZVOUS", c.rendezvous, s.host, s.port);
  } else {
    FERRY_CHECK(!launch.host.empty() && launch.port != 0, InvalidArgument,
                "ferry::Store on rank ", s.rank, ": needs rank 0's address: "
                "StoreOptions::address, FERRY_RENDEZVOUS=host:port, or MASTER_ADDR and "
                "MASTER_PORT (torchrun, srun); ", launch.describe());
    s.host = launch.host;
    s.port = launch.port;
  }
  s.secret = !o.secret.empty() ? o.secret : c.secret;
  FERRY_CHECK(!s.secret.empty() && s.secret.size() <= detail::kMaxSecretBytes, InvalidArgument,
              "ferry::Store on rank ", s.rank, ": FERRY_SECRET (or StoreOptions::secret) must be "
              "the job's secret, 1 to ", detail::kMaxSecretBytes, " bytes, given ",
              s.secret.size(), " bytes");
  FERRY_CHECK(o.timeout.count() >= 0, InvalidArgument, "ferry::Store on rank ", s.rank,
              ": StoreOptions::timeout must not be negative, given ", o.timeout.count(), " ms");
  s.timeout = o.timeout.count() > 0 ? o.timeout : default_timeout();
  FERRY_CHECK(s.rank == 0 || s.port != 0, InvalidArgument, "ferry::Store on rank ", s.rank,
              ": port 0 (any free port) is for rank 0 only; the other ranks need the port it "
              "bound (Store::port())");
  if (s.rank == 0) {
    const std::string bind =
        !o.bind.empty() ? o.bind : (!c.rendezvous_bind.empty() ? c.rendezvous_bind : "127.0.0.1");
    s.server = std::make_unique<detail::StoreServer>(bind, s.port, s.secret);
    s.port = s.server->port();
    // Rank 0 is a client of its own server like every rank, through the address it bound.
    if (bind == "0.0.0.0") s.host = "127.0.0.1";
    else if (bind == "::") s.host = "::1";
    else s.host = bind;
    FERRY_LOG(Info, "init", "store: rank 0 serving on ", bind, ":", s.port);
  }
}

Store::~Store() = default;
Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;

void Store::set(const std::string& key, const std::string& value) {
  impl_->check_key("set", key);
  FERRY_CHECK(value.size() <= detail::kStoreMaxValueBytes, InvalidArgument, impl_->who("set"),
              ": key ", shown(key), ": values are at most ", detail::kStoreMaxValueBytes,
              " bytes, given ", value.size());
  impl_->call("set", StoreRequest{StoreOp::Set, 0, {key}, value});
}

std::string Store::get(const std::string& key) { return get(key, impl_->timeout); }

std::string Store::get(const std::string& key, std::chrono::milliseconds timeout) {
  impl_->check_key("get", key);
  impl_->check_wait("get", timeout);
  const StoreResponse r =
      impl_->call("get", StoreRequest{StoreOp::Get, timeout.count(), {key}, {}}, timeout);
  FERRY_CHECK(r.status == StoreStatus::Ok, TimeoutError, impl_->who("get"), ": key ",
              shown(key), " was not set within ", timeout.count(), " ms (", impl_->where(), ")");
  return r.payload;
}

int64_t Store::add(const std::string& key, int64_t delta) {
  impl_->check_key("add", key);
  const StoreResponse r = impl_->call("add", StoreRequest{StoreOp::Add, delta, {key}, {}});
  FERRY_CHECK(r.payload.size() == 8, TransportError, impl_->who("add"), ": ", impl_->where(),
              " sent an answer of ", r.payload.size(), " bytes, expected 8");
  return detail::decode_i64(reinterpret_cast<const unsigned char*>(r.payload.data()));
}

void Store::wait(const std::vector<std::string>& keys) { wait(keys, impl_->timeout); }

void Store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  impl_->check_keys("wait", keys);
  impl_->check_wait("wait", timeout);
  if (keys.empty()) return;
  const StoreResponse r =
      impl_->call("wait", StoreRequest{StoreOp::Wait, timeout.count(), keys, {}}, timeout);
  // The server names the keys still missing at its deadline.
  FERRY_CHECK(r.status == StoreStatus::Ok, TimeoutError, impl_->who("wait"), ": key(s) ",
              r.payload, " of the ", keys.size(), " waited for not set within ", timeout.count(),
              " ms (", impl_->where(), ")");
}

bool Store::check(const std::vector<std::string>& keys) {
  impl_->check_keys("check", keys);
  if (keys.empty()) return true;
  return impl_->call("check", StoreRequest{StoreOp::Check, 0, keys, {}}).payload == "\1";
}

bool Store::delete_key(const std::string& key) {
  impl_->check_key("delete_key", key);
  return impl_->call("delete_key", StoreRequest{StoreOp::Delete, 0, {key}, {}}).payload == "\1";
}

int64_t Store::num_keys() {
  const StoreResponse r = impl_->call("num_keys", StoreRequest{StoreOp::NumKeys, 0, {}, {}});
  FERRY_CHECK(r.payload.size() == 8, TransportError, impl_->who("num_keys"), ": ",
              impl_->where(), " sent an answer of ", r.payload.size(), " bytes, expected 8");
  return detail::decode_i64(reinterpret_cast<const unsigned char*>(r.payload.data()));
}

int Store::rank() const { return impl_->rank; }
int Store::port() const { return impl_->port; }
std::string Store::address() const { return str(impl_->host, ":", impl_->port); }

}  // namespace ferry
