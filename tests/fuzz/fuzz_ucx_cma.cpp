// Fuzz target: the CMA protocol's descriptor and acknowledgement (backends/ucx/ucx_cma.h),
// which a peer on this host sends in place of data and in answer to it.
//
// Input: byte 0 picks descriptor or acknowledgement, the rest is the message.
// Properties: decoding never reads past the message; an accepted message has the wire size,
// a cookie in range, a known status, and encodes back to the same bytes.
#include <ferry/backends/ucx/ucx_cma.h>
#include <ferry/backends/ucx/ucx_tag.h>

#include "fuzz_check.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

using namespace ferry::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::vector<uint8_t> message(data + 1, data + size);
  const void* bytes = message.empty() ? nullptr : message.data();
  std::string error;
  if (data[0] & 1) {
    const auto d = decode_cma_descriptor(bytes, message.size(), error);
    if (!d) {
      FUZZ_EXPECT(!error.empty());
      return 0;
    }
    FUZZ_EXPECT(message.size() == kCmaDescriptorBytes);
    FUZZ_EXPECT(d->cookie >= 1 && d->cookie <= kUcxMaxCmaCookie);
    FUZZ_EXPECT(d->address != 0 && d->bytes != 0 && d->address + d->bytes > d->address);
    unsigned char out[kCmaDescriptorBytes];
    encode_cma_descriptor(*d, out);
    // Bytes 6-7 are the reserved field, which the decoder ignores and the encoder zeroes.
    FUZZ_EXPECT(std::memcmp(out, message.data(), 6) == 0);
    FUZZ_EXPECT(std::memcmp(out + 8, message.data() + 8, kCmaDescriptorBytes - 8) == 0);
  } else {
    const auto a = decode_cma_ack(bytes, message.size(), error);
    if (!a) {
      FUZZ_EXPECT(!error.empty());
      return 0;
    }
    FUZZ_EXPECT(message.size() == kCmaAckBytes);
    const auto status = static_cast<uint16_t>(a->status);
    FUZZ_EXPECT(status >= 1 && status <= 5);
    unsigned char out[kCmaAckBytes];
    encode_cma_ack(*a, out);
    FUZZ_EXPECT(std::memcmp(out, message.data(), kCmaAckBytes) == 0);
  }
  return 0;
}
