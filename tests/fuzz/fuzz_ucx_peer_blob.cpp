// Fuzz target: the blob each UCX rank publishes in the address exchange
// (backends/ucx/ucx_peer_blob.h), read by every other rank of the job.
//
// Properties: a malformed blob is a TransportError, never a read past its end; an accepted one
// has a bounded host and two non-empty addresses of bounded total size, and encodes back to the
// same bytes.
#include <ferry/backends/ucx/ucx_peer_blob.h>
#include <ferry/runtime/error.h>

#include "fuzz_check.h"

#include <cstdint>
#include <string>

using namespace ferry::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string blob(reinterpret_cast<const char*>(data), size);
  try {
    const UcxPeerBlob p = decode_ucx_peer_blob(blob, 0, 1);
    FUZZ_EXPECT(p.host.size() <= kMaxUcxHostBytes);
    FUZZ_EXPECT(!p.address.empty() && !p.side_address.empty() &&
                p.address.size() + p.side_address.size() <= kMaxUcxAddressBytes);
    FUZZ_EXPECT(encode_ucx_peer_blob(p) == blob);
  } catch (const ferry::TransportError& e) {
    FUZZ_EXPECT(std::string(e.what()).find("rank 1") != std::string::npos);
  }
  return 0;
}
