#include <ferry/backends/ucx/ucx_abandon_message.h>

#include <ferry/runtime/error.h>

#include <cstring>

namespace ferry::detail {
namespace {

constexpr uint32_t kMagic = 0x4142'4446;  // "FDBA"
constexpr uint16_t kVersion = 1;

// Fixed little-endian header; both ends run on the same kind of host (one job).
struct Header {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  uint32_t rank;
  uint32_t group;
  uint32_t why_bytes;
};
static_assert(sizeof(Header) == 20);

}  // namespace

std::string encode_abandon(const AbandonMessage& m) {
  const std::string why = m.why.substr(0, kMaxAbandonReason);
  Header h{kMagic, kVersion, 0, static_cast<uint32_t>(m.rank), m.group,
           static_cast<uint32_t>(why.size())};
  std::string out(sizeof h, '\0');
  std::memcpy(out.data(), &h, sizeof h);
  out.append(why);
  return out;
}

std::optional<AbandonMessage> decode_abandon(const void* data, size_t bytes, int world_size,
                                             std::string& error) {
  Header h{};
  if (data == nullptr || bytes < sizeof h) {
    error = str("too short (", bytes, " bytes, the header alone is ", sizeof h, ")");
    return std::nullopt;
  }
  std::memcpy(&h, data, sizeof h);
  if (h.magic != kMagic) {
    error = str("bad magic 0x", std::hex, h.magic);
    return std::nullopt;
  }
  if (h.version != kVersion) {
    error = str("version ", h.version, ", expected ", kVersion);
    return std::nullopt;
  }
  if (h.rank >= static_cast<uint32_t>(world_size)) {
    error = str("rank ", h.rank, " outside the world of ", world_size);
    return std::nullopt;
  }
  if (h.why_bytes > kMaxAbandonReason || h.why_bytes != bytes - sizeof h) {
    error = str("reason of ", h.why_bytes, " bytes in a message of ", bytes, " bytes (at most ",
                kMaxAbandonReason, ")");
    return std::nullopt;
  }
  AbandonMessage m;
  m.rank = static_cast<int>(h.rank);
  m.group = h.group;
  m.why.assign(static_cast<const char*>(data) + sizeof h, h.why_bytes);
  return m;
}

}  // namespace ferry::detail
