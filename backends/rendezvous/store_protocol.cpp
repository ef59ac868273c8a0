#include <ferry/backends/rendezvous/store_protocol.h>

#include <ferry/backends/rendezvous/rendezvous_frame.h>
#include <ferry/runtime/error.h>

namespace ferry::detail {
namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_u16(std::string& out, uint16_t v) {
  out.push_back(static_cast<char>(v & 0xff));
  out.push_back(static_cast<char>(v >> 8));
}

// Reads from `body` at `at`, refusing to run past its end.
struct Reader {
  const std::string& body;
  size_t at = 0;
  bool take(size_t n) {
    if (body.size() - at < n) return false;
    at += n;
    return true;
  }
  const unsigned char* here() const {
    return reinterpret_cast<const unsigned char*>(body.data()) + at;
  }
};

}  // namespace

std::string encode_i64(int64_t v) {
  std::string out;
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
  return out;
}

int64_t decode_i64(const unsigned char* p) {
  uint64_t u = 0;
  for (int i = 7; i >= 0; --i) u = (u << 8) | p[i];
  return static_cast<int64_t>(u);
}

uint32_t decode_u32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

const char* store_op_name(StoreOp op) {
  switch (op) {
    case StoreOp::Hello: return "hello";
    case StoreOp::Set: return "set";
    case StoreOp::Get: return "get";
    case StoreOp::Add: return "add";
    case StoreOp::Wait: return "wait";
    case StoreOp::Check: return "check";
    case StoreOp::Delete: return "delete_key";
    case StoreOp::NumKeys: return "num_keys";
  }
  return "?";
}

std::string encode_store_hello(uint32_t rank, const std::string& secret) {
  std::string out;
  put_u32(out, kStoreMagic);
  put_u16(out, kStoreVersion);
  put_u16(out, 0);
  put_u32(out, rank);
  put_u32(out, static_cast<uint32_t>(secret.size()));
  return out + secret;
}

std::optional<uint32_t> decode_store_hello(const unsigned char* p, uint32_t& secret_bytes,
                                           std::string& error) {
  if (decode_u32(p) != kStoreMagic) {
    error = "not a ferry store client (bad magic)";
    return std::nullopt;
  }
  const uint16_t version = static_cast<uint16_t>(p[4] | p[5] << 8);
  if (version != kStoreVersion) {
    error = str("store protocol version ", version, ", this server speaks ", kStoreVersion);
    return std::nullopt;
  }
  secret_bytes = decode_u32(p + 12);
  if (secret_bytes == 0 || secret_bytes > kMaxSecretBytes) {
    error = str("a secret of ", secret_bytes, " bytes (1 to ", kMaxSecretBytes, " expected)");
    return std::nullopt;
  }
  return decode_u32(p + 8);
}

std::string encode_store_request(const StoreRequest& r) {
  std::string body;
  body.push_back(static_cast<char>(r.op));
  body += encode_i64(r.arg);
  put_u32(body, static_cast<uint32_t>(r.keys.size()));
  for (const std::string& k : r.keys) {
    put_u32(body, static_cast<uint32_t>(k.size()));
    body += k;
  }
  put_u32(body, static_cast<uint32_t>(r.value.size()));
  body += r.value;
  std::string out;
  put_u32(out, static_cast<uint32_t>(body.size()));
  return out + body;
}

std::string encode_store_response(StoreStatus status, const std::string& payload) {
  std::string out;
  put_u32(out, static_cast<uint32_t>(1 + payload.size()));
  out.push_back(static_cast<char>(status));
  return out + payload;
}

std::optional<StoreRequest> decode_store_request(const std::string& body, std::string& error) {
  Reader in{body};
  StoreRequest r;
  if (!in.take(1 + 8 + 4)) {
    error = "a request shorter than its fixed part";
    return std::nullopt;
  }
  const unsigned char* head = reinterpret_cast<const unsigned char*>(body.data());
  const uint8_t op = head[0];
  if (op < static_cast<uint8_t>(StoreOp::Set) || op > static_cast<uint8_t>(StoreOp::NumKeys)) {
    error = str("unknown op ", static_cast<int>(op));
    return std::nullopt;
  }
  r.op = static_cast<StoreOp>(op);
  r.arg = decode_i64(head + 1);
  const uint32_t nkeys = decode_u32(head + 9);
  if (nkeys > kStoreMaxKeysPerCall) {
    error = str(nkeys, " keys in one call (at most ", kStoreMaxKeysPerCall, ")");
    return std::nullopt;
  }
  for (uint32_t i = 0; i < nkeys; ++i) {
    const unsigned char* at = in.here();
    if (!in.take(4)) {
      error = "a key's length past the end of the request";
      return std::nullopt;
    }
    const uint32_t n = decode_u32(at);
    if (n == 0 || n > kStoreMaxKeyBytes) {
      error = str("a key of ", n, " bytes (1 to ", kStoreMaxKeyBytes, ")");
      return std::nullopt;
    }
    const size_t from = in.at;
    if (!in.take(n)) {
      error = "a key past the end of the request";
      return std::nullopt;
    }
    r.keys.push_back(body.substr(from, n));
  }
  const unsigned char* at = in.here();
  if (!in.take(4)) {
    error = "the value's length past the end of the request";
    return std::nullopt;
  }
  const uint32_t n = decode_u32(at);
  if (n > kStoreMaxValueBytes || n != body.size() - in.at) {
    error = str("a value of ", n, " bytes where ", body.size() - in.at, " remain (at most ",
                kStoreMaxValueBytes, ")");
    return std::nullopt;
  }
  r.value = body.substr(in.at);
  return r;
}

}  // namespace ferry::detail
