// Fuzz target: the FERRY_* configuration (runtime/config.h). Not from a peer, but text that a
// launcher passes to every rank, parsed before anything else runs.
//
// Input: NUL-separated values, given in turn to the known variables. Properties: reading either
// succeeds with every setting inside its documented range, or throws InvalidArgument naming
// a FERRY_* variable; nothing else escapes, no undefined behaviour (the double-to-integer cast
// of FERRY_TIMEOUT was undefined for inf and 1e300 once).
#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>

#include "fuzz_check.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::map<std::string, std::string> env;
  const auto& known = ferry::known_settings();
  size_t at = 0, next = 0;
  while (at <= size && next < known.size()) {
    const auto* nul = static_cast<const uint8_t*>(std::memchr(data + at, 0, size - at));
    const size_t end = nul == nullptr ? size : static_cast<size_t>(nul - data);
    env[known[next++].name] = std::string(reinterpret_cast<const char*>(data + at), end - at);
    at = end + 1;
  }
  auto get = [&env](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  try {
    const ferry::Config c = ferry::detail::read_config(get);
    FUZZ_EXPECT(c.timeout >= ferry::kMinTimeout && c.timeout <= ferry::kMaxTimeout);
    FUZZ_EXPECT(c.host_cache_mb >= 0 && c.host_cache_mb < (int64_t{1} << 30));
    FUZZ_EXPECT(c.ucx_cma_min_bytes == 0 || c.ucx_cma_min_bytes >= 1024);
    FUZZ_EXPECT(c.debug == "off" || c.debug == "warn" || c.debug == "info" || c.debug == "trace");
    (void)ferry::detail::describe_settings(c);
  } catch (const ferry::InvalidArgument& e) {
    FUZZ_EXPECT(std::strstr(e.what(), "FERRY_") != nullptr);
  }
  return 0;
}
