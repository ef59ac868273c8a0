// Fuzz target: the UCX abandon message (backends/ucx/ucx_abandon_message.h), an active message
// any peer of the worker may send.
//
// Input: byte 0 is the receiver's world size (1-256), the rest the message as UCX delivers it.
// Properties: decoding never reads past the message; an accepted message names a rank inside
// the world, carries a bounded reason, and encodes back to the same bytes.
#include <ferry/backends/ucx/ucx_abandon_message.h>

#include "fuzz_check.h"

#include <cstdint>
#include <string>
#include <vector>

using namespace ferry::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int world = 1 + data[0];
  // A copy of exactly the message's bytes, so that ASan sees any read past its end.
  const std::vector<uint8_t> message(data + 1, data + size);
  std::string error;
  const auto m = decode_abandon(message.empty() ? nullptr : message.data(), message.size(),
                                world, error);
  if (!m) {
    FUZZ_EXPECT(!error.empty());
    return 0;
  }
  FUZZ_EXPECT(m->rank >= 0 && m->rank < world);
  FUZZ_EXPECT(m->why.size() <= kMaxAbandonReason);
  const std::string again = encode_abandon(*m);
  FUZZ_EXPECT(again.size() == message.size());
  // Bytes 6-7 are the reserved field, which the decoder ignores and the encoder writes as zero.
  const std::string sent(message.begin(), message.end());
  FUZZ_EXPECT(again.compare(0, 6, sent, 0, 6) == 0);
  FUZZ_EXPECT(again.compare(8, std::string::npos, sent, 8, std::string::npos) == 0);
  return 0;
}
