#include <ferry/backends/ucx/ucx_settings.h>

#include <ferry/backends/ucx/ucx_worker.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cctype>
#include <cstdlib>
#include <string>
#include <vector>

namespace ferry::detail {
namespace {

struct Default {
  const char* name;   // UCX variable without the UCX_ prefix
  const char* value;
  bool transport_level;  // read by UCT from the environment, out of ucp_config_modify's reach
};

// Why each one:
//  - POSIX_ / SYSV_ERROR_HANDLING: ferry's endpoints use UCP_ERR_HANDLING_MODE_PEER (a dead peer
//    must fail our requests, not hang them). UCX 1.13 leaves the shared-memory transports out of
//    such endpoints unless they handle errors, and then falls back to TCP on loopback (3-4x the
//    latency here). With these, shared memory stays in use and a dead peer is found by the
//    keepalive below. UCX reads them only from the environment, so they are set there (never
//    overriding a value the user set).
//  - KEEPALIVE_INTERVAL: how often UCX checks that peers live (for shared memory: that the
//    process exists). UCX's 20 s would outlast most deadlines; 1 s costs one cheap check per
//    peer per second.
constexpr Default kDefaults[] = {
    {"POSIX_ERROR_HANDLING", "y", true},
    {"SYSV_ERROR_HANDLING", "y", true},
    {"KEEPALIVE_INTERVAL", "1s", false},
};

// Whether UCX_TLS lets UCX use the shared-memory transport `name` ("posix" or "sysv"): UCX
// warns about every variable of a transport it does not use.
bool transport_wanted(const std::string& name) {
  const char* tls = std::getenv("UCX_TLS");
  if (tls == nullptr || *tls == '\0') return true;
  std::string t = tls;
  const bool excluding = t[0] == '^';
  if (excluding) t = t.substr(1);
  bool named = false;
  size_t at = 0;
  while (at <= t.size()) {
    const size_t comma = std::min(t.find(',', at), t.size());
    const std::string item = t.substr(at, comma - at);
    named = named || item == name || item == "sm" || item == "shm" || item == "mm" ||
            (!excluding && item == "all");
    at = comma + 1;
  }
  return excluding ? !named : named;
}

}  // namespace

bool ucx_peer_error_handling() { return config().ucx_peer_errors; }

size_t ucx_cma_min_bytes() {
  const Config& c = config();
  if (!c.ucx_cma) return SIZE_MAX;
  return c.ucx_cma_min_bytes == 0 ? kUcxCmaDefaultMinBytes
                                  : static_cast<size_t>(c.ucx_cma_min_bytes);
}

void apply_ucx_transport_defaults() {
  // Without peer error handling UCX keeps shared memory anyway.
  if (!ucx_peer_error_handling()) return;
  for (const Default& d : kDefaults) {
    if (!d.transport_level) continue;
    const std::string name = d.name;  // POSIX_... or SYSV_...
    if (!transport_wanted(name.rfind("POSIX", 0) == 0 ? "posix" : "sysv")) continue;
    const std::string env = std::string("UCX_") + d.name;
    if (setenv(env.c_str(), d.value, /*overwrite=*/0) == 0)
      FERRY_LOG(Info, "ucx", env, "=", std::getenv(env.c_str()));
  }
}

void apply_ucx_defaults(ucp_config_t* config) {
  for (const Default& d : kDefaults) {
    if (d.transport_level) continue;
    const std::string env = std::string("UCX_") + d.name;
    if (const char* v = std::getenv(env.c_str()); v != nullptr && *v != '\0') continue;
    const ucs_status_t status = ucp_config_modify(config, d.name, d.value);
    FERRY_CHECK(status == UCS_OK, TransportError, "ucx transport: setting UCX ", d.name, "=",
                d.value, " failed: ", ucx_status_str(status), "; set ", env,
                " yourself to override");
    FERRY_LOG(Info, "ucx", "UCX ", d.name, "=", d.value, " (ferry's default; set ", env,
              " to change it)");
  }
}

void with_small_shm_receive_pools(const std::function<void()>& make) {
  // 64 buffers: the interface takes one per element of its receive queue at once (64, UCX's
  // FIFO_SIZE; a smaller step only makes the pool grow, a shared-memory file each time, until it
  // has them), and a diagnosis brings one message per peer.
  std::vector<std::string> set;
  for (const char* tl : {"posix", "sysv"}) {
    if (!transport_wanted(tl)) continue;  // UCX warns about variables of unused transports
    std::string env = std::string("UCX_") + tl + "_RX_BUFS_GROW";
    for (char& c : env) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (std::getenv(env.c_str()) != nullptr) continue;  // the user's
    if (setenv(env.c_str(), "64", /*overwrite=*/0) == 0) set.push_back(env);
  }
  struct Restore {
    const std::vector<std::string>& set;
    ~Restore() {
      for (const std::string& env : set) unsetenv(env.c_str());
    }
  } restore{set};
  make();
}

}  // namespace ferry::detail
