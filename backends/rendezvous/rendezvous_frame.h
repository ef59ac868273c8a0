// The frames of the TCP rendezvous, and their validation (internal).
//
// Every frame starts with a fixed 28-byte header, little-endian:
//   magic u32 "FRDV" | version u16 | type u16 | seq u32 | rank u32 | world u32 |
//   secret_bytes u32 | payload_bytes u32
// followed by the secret and then the payload. A connection carries exactly two frames: the
// rank's Hello (seq 0), then rank 0's Table or Reject (seq 1). The header is checked field by
// field before anything after it is read, and the lengths are bounded before any allocation;
// the secret is compared (in constant time) before the payload is read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ferry::detail {

enum class FrameType : uint16_t { Hello = 1, Table = 2, Reject = 3 };

inline constexpr size_t kFrameHeaderBytes = 28;
inline constexpr size_t kMaxSecretBytes = 256;
inline constexpr size_t kMaxBlobBytes = 64 * 1024 + 256;  // one rank's published blob
inline constexpr size_t kMaxRejectBytes = 1024;
inline constexpr uint32_t kMaxRendezvousWorld = 1u << 20;

struct FrameHeader {
  FrameType type = FrameType::Hello;
  uint32_t seq = 0;
  uint32_t rank = 0;
  uint32_t world = 0;
  uint32_t secret_bytes = 0;
  uint32_t payload_bytes = 0;
};

std::string encode_header(const FrameHeader& h);
// A whole frame: its header (the sizes taken from `secret` and `payload`), the secret, the
// payload. `secret` may be empty (rejects go to peers that may not know it).
std::string encode_frame(FrameType type, uint32_t seq, uint32_t rank, uint32_t world,
                         const std::string& secret, const std::string& payload);
// What the receiver expects of the next frame.
struct FrameExpectation {
  std::vector<FrameType> types;
  uint32_t seq = 0;
  uint32_t world = 0;
  bool client_rank = false;  // Hello: rank must be in [1, world)
};
// The header, or nullopt with `error` describing the first bad field.
std::optional<FrameHeader> decode_header(const unsigned char* bytes, const FrameExpectation& want,
                                         std::string& error);

// The largest payload a frame of `type` may carry in a world of `world` ranks.
size_t max_payload(FrameType type, uint32_t world);

// Table payload: for each rank in order, u32 length and the blob.
std::string encode_table(const std::vector<std::string>& blobs);
std::optional<std::vector<std::string>> decode_table(const std::string& payload, uint32_t world,
                                                     std::string& error);

// Equal in time that depends only on the lengths' maximum, not on where they differ.
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace ferry::detail
