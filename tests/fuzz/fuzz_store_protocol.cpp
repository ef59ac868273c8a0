// Fuzz target: the key-value store's wire format (backends/rendezvous/store_protocol.h), which
// rank 0's store server reads from any process that connects to its port.
//
// Input: the bytes of one connection as the server reads them: the 16-byte hello, its secret,
// then requests, each a u32 length and a body (framed as the server frames them: a length of 0
// or past kStoreMaxBodyBytes ends the connection). The same bytes are also decoded as one
// request body on their own, so that short inputs reach the request decoder directly.
// Properties: decoding never reads past the input or crashes; an accepted hello has a secret
// length within bounds and encodes back to the same bytes (but for its two reserved bytes); an
// accepted request satisfies every bound the server relies on and encodes back to the same
// bytes; a refusal always says why; i64 and u32 fields decode as they were encoded.
#include <ferry/backends/rendezvous/rendezvous_frame.h>
#include <ferry/backends/rendezvous/store_protocol.h>

#include "fuzz_check.h"

#include <cstdint>
#include <cstring>
#include <string>

using namespace ferry::detail;

namespace {

const unsigned char* bytes_of(const std::string& s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

// Decodes one request body and checks what the server relies on.
void check_request(const std::string& body) {
  std::string error;
  const auto r = decode_store_request(body, error);
  if (!r) {
    FUZZ_EXPECT(!error.empty());
    return;
  }
  FUZZ_EXPECT(error.empty());
  FUZZ_EXPECT(r->op >= StoreOp::Set && r->op <= StoreOp::NumKeys);
  FUZZ_EXPECT(r->keys.size() <= kStoreMaxKeysPerCall);
  for (const std::string& k : r->keys) FUZZ_EXPECT(!k.empty() && k.size() <= kStoreMaxKeyBytes);
  FUZZ_EXPECT(r->value.size() <= kStoreMaxValueBytes);
  FUZZ_EXPECT(std::string(store_op_name(r->op)) != "?");
  // Encoding the accepted request gives back its length and the bytes it came from.
  const std::string again = encode_store_request(*r);
  FUZZ_EXPECT(again.size() == 4 + body.size());
  FUZZ_EXPECT(decode_u32(bytes_of(again)) == body.size());
  FUZZ_EXPECT(again.compare(4, std::string::npos, body) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  check_request(input);

  if (size >= 8) {
    const int64_t v = decode_i64(data);
    FUZZ_EXPECT(encode_i64(v) == input.substr(0, 8));
    FUZZ_EXPECT(decode_u32(data) == (static_cast<uint32_t>(v) & 0xffffffffu));
  }

  // The connection as the server reads it: the hello first.
  if (size < kStoreHelloBytes) return 0;
  uint32_t secret_bytes = 0;
  std::string error;
  const auto rank = decode_store_hello(data, secret_bytes, error);
  if (!rank) {
    FUZZ_EXPECT(!error.empty());
    return 0;
  }
  FUZZ_EXPECT(error.empty());
  FUZZ_EXPECT(secret_bytes >= 1 && secret_bytes <= kMaxSecretBytes);
  if (size < kStoreHelloBytes + secret_bytes) return 0;
  const std::string secret = input.substr(kStoreHelloBytes, secret_bytes);
  std::string hello = encode_store_hello(*rank, secret);
  FUZZ_EXPECT(hello.size() == kStoreHelloBytes + secret_bytes);
  // Bytes 6-7 are reserved: sent as 0, not checked by the server.
  hello[6] = input[6];
  hello[7] = input[7];
  FUZZ_EXPECT(hello == input.substr(0, hello.size()));

  // Then requests, framed as the server frames them.
  size_t at = kStoreHelloBytes + secret_bytes;
  while (size - at >= 4) {
    const uint32_t len = decode_u32(data + at);
    if (len == 0 || len > kStoreMaxBodyBytes) break;  // the server refuses and closes
    if (size - at - 4 < len) break;                    // the rest has not arrived
    check_request(input.substr(at + 4, len));
    at += 4 + size_t{len};
  }

  // Responses carry their length the same way, counting the status byte.
  const std::string rest = input.substr(at);
  const std::string response = encode_store_response(StoreStatus::Ok, rest);
  FUZZ_EXPECT(decode_u32(bytes_of(response)) == 1 + rest.size());
  FUZZ_EXPECT(response[4] == static_cast<char>(StoreStatus::Ok));
  FUZZ_EXPECT(response.compare(5, std::string::npos, rest) == 0);
  return 0;
}
