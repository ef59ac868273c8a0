// Fuzz target: the TCP rendezvous frames (backends/rendezvous/rendezvous_frame.h), which rank 0
// reads from any process that connects to its port and every rank reads from rank 0.
//
// Input: byte 0 picks what the receiver expects (which frame types, client rank or not), bytes
// 1-2 the job's world size, then a 28-byte header, then the rest as a Table payload.
// Properties: decoding never reads past the input or crashes; an accepted header satisfies
// every bound the receiver relies on (the lengths it will allocate); an accepted table has
// `world` entries and encodes back to the same bytes.
#include <ferry/backends/rendezvous/rendezvous_frame.h>

#include "fuzz_check.h"

#include <cstdint>
#include <cstring>
#include <string>

using namespace ferry::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3 + kFrameHeaderBytes) return 0;
  FrameExpectation want;
  const uint8_t mode = data[0];
  if (mode & 1) want.types.push_back(FrameType::Hello);
  if (mode & 2) want.types.push_back(FrameType::Table);
  if (mode & 4) want.types.push_back(FrameType::Reject);
  want.client_rank = (mode & 8) != 0;
  want.seq = (mode & 16) ? 1 : 0;
  // Worlds up to 65535; kMaxRendezvousWorld bounds the real ones higher, which only scales the
  // Table bound.
  want.world = static_cast<uint32_t>(data[1] | data[2] << 8);
  const uint8_t* header = data + 3;
  std::string error;
  const auto h = decode_header(header, want, error);
  if (h) {
    FUZZ_EXPECT(error.empty());
    FUZZ_EXPECT(h->secret_bytes <= kMaxSecretBytes);
    FUZZ_EXPECT(h->payload_bytes <= max_payload(h->type, want.world));
    FUZZ_EXPECT(h->seq == want.seq && h->world == want.world);
    if (want.client_rank) FUZZ_EXPECT(h->rank >= 1 && h->rank < want.world);
    // What the receiver will read next is bounded by the frame's type.
    FUZZ_EXPECT(max_payload(h->type, want.world) <=
                size_t{want.world} * (4 + kMaxBlobBytes) + kMaxBlobBytes + kMaxRejectBytes);
    // Encoding the accepted header gives back the bytes it came from.
    FUZZ_EXPECT(encode_header(*h) == std::string(reinterpret_cast<const char*>(header),
                                                 kFrameHeaderBytes));
  } else {
    FUZZ_EXPECT(!error.empty());
  }

  const std::string payload(reinterpret_cast<const char*>(data + 3 + kFrameHeaderBytes),
                            size - 3 - kFrameHeaderBytes);
  // Small worlds only: a table for a large world needs at least 4 bytes per rank anyway.
  const uint32_t world = want.world % 64;
  error.clear();
  const auto blobs = decode_table(payload, world, error);
  if (blobs) {
    FUZZ_EXPECT(blobs->size() == world);
    for (const std::string& b : *blobs) FUZZ_EXPECT(b.size() <= kMaxBlobBytes);
    FUZZ_EXPECT(encode_table(*blobs) == payload);
  } else {
    FUZZ_EXPECT(!error.empty());
  }

  // constant_time_equal is plain equality, whatever the lengths.
  const std::string a = payload.substr(0, payload.size() / 2);
  const std::string b = payload.substr(payload.size() / 2);
  FUZZ_EXPECT(constant_time_equal(a, b) == (a == b));
  FUZZ_EXPECT(constant_time_equal(a, a));
  return 0;
}
