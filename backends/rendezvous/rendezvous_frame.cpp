#include <ferry/backends/rendezvous/rendezvous_frame.h>

#include <ferry/runtime/error.h>

#include <algorithm>

namespace ferry::detail {
namespace {

constexpr uint32_t kMagic = 0x5644'5246;  // "FRDV" in little-endian byte order
constexpr uint16_t kVersion = 1;

void put32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put16(std::string& out, uint16_t v) {
  for (int i = 0; i < 2; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
uint32_t get32(const unsigned char* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
uint16_t get16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

const char* type_name(uint16_t t) {
  switch (t) {
    case 1: return "Hello";
    case 2: return "Table";
    case 3: return "Reject";
    default: return "unknown";
  }
}

}  // namespace

std::string encode_header(const FrameHeader& h) {
  std::string out;
  put32(out, kMagic);
  put16(out, kVersion);
  put16(out, static_cast<uint16_t>(h.type));
  put32(out, h.seq);
  put32(out, h.rank);
  put32(out, h.world);
  put32(out, h.secret_bytes);
  put32(out, h.payload_bytes);
  return out;
}

std::string encode_frame(FrameType type, uint32_t seq, uint32_t rank, uint32_t world,
                         const std::string& secret, const std::string& payload) {
  std::string frame = encode_header({type, seq, rank, world, static_cast<uint32_t>(secret.size()),
                                     static_cast<uint32_t>(payload.size())});
  frame += secret;
  frame += payload;
  return frame;
}

size_t max_payload(FrameType type, uint32_t world) {
  switch (type) {
    case FrameType::Hello: return kMaxBlobBytes;
    case FrameType::Table: return size_t{world} * (4 + kMaxBlobBytes);
    case FrameType::Reject: return kMaxRejectBytes;
  }
  return 0;
}

std::optional<FrameHeader> decode_header(const unsigned char* p, const FrameExpectation& want,
                                         std::string& error) {
  if (const uint32_t magic = get32(p); magic != kMagic) {
    error = str("bad magic 0x", std::hex, magic, " (not a ferry rendezvous frame)");
    return std::nullopt;
  }
  if (const uint16_t version = get16(p + 4); version != kVersion) {
    error = str("protocol version ", version, ", expected ", kVersion);
    return std::nullopt;
  }
  const uint16_t type = get16(p + 6);
  FrameHeader h;
  h.type = static_cast<FrameType>(type);
  if (std::find(want.types.begin(), want.types.end(), h.type) == want.types.end()) {
    error = str("unexpected frame type ", type, " (", type_name(type), ")");
    return std::nullopt;
  }
  h.seq = get32(p + 8);
  h.rank = get32(p + 12);
  h.world = get32(p + 16);
  h.secret_bytes = get32(p + 20);
  h.payload_bytes = get32(p + 24);
  if (h.seq != want.seq) {
    error = str("frame sequence ", h.seq, ", expected ", want.seq);
  } else if (h.world != want.world) {
    error = str("world size ", h.world, ", but this job has ", want.world,
                " ranks (FERRY_WORLD_SIZE differs between ranks)");
  } else if (want.client_rank && (h.rank == 0 || h.rank >= want.world)) {
    error = str("rank ", h.rank, " outside [1, ", want.world, ")");
  } else if (h.secret_bytes > kMaxSecretBytes) {
    error = str("secret of ", h.secret_bytes, " bytes (at most ", kMaxSecretBytes, ")");
  } else if (h.payload_bytes > max_payload(h.type, want.world)) {
    error = str(type_name(type), " payload of ", h.payload_bytes, " bytes (at most ",
                max_payload(h.type, want.world), ")");
  } else {
    return h;
  }
  return std::nullopt;
}

std::string encode_table(const std::vector<std::string>& blobs) {
  std::string out;
  for (const std::string& b : blobs) {
    put32(out, static_cast<uint32_t>(b.size()));
    out += b;
  }
  return out;
}

std::optional<std::vector<std::string>> decode_table(const std::string& payload, uint32_t world,
                                                     std::string& error) {
  std::vector<std::string> blobs;
  size_t at = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(payload.data());
  for (uint32_t r = 0; r < world; ++r) {
    if (payload.size() - at < 4) {
      error = str("table ends before the entry of rank ", r);
      return std::nullopt;
    }
    const uint32_t len = get32(p + at);
    at += 4;
    if (len > kMaxBlobBytes || len > payload.size() - at) {
      error = str("entry of rank ", r, " claims ", len, " bytes, ", payload.size() - at,
                  " remain (at most ", kMaxBlobBytes, ")");
      return std::nullopt;
    }
    blobs.push_back(payload.substr(at, len));
    at += len;
  }
  if (at != payload.size()) {
    error = str(payload.size() - at, " bytes after the last entry");
    return std::nullopt;
  }
  return blobs;
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

}  // namespace ferry::detail
