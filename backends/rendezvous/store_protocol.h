// The wire format of the key-value store (store.h) between its clients and rank 0's server
// (internal).
//
// A connection starts with the client's hello: magic u32 "FKVS" | version u16 | 0 u16 |
// rank u32 | secret_bytes u32 | the secret. Then requests and responses alternate, one request
// in flight per connection. Both are a u32 body length followed by the body, little-endian:
//   request   op u8 | arg i64 (add's delta, or a wait's timeout in ms) | nkeys u32 |
//             nkeys x (u32 length, key bytes) | value_bytes u32 | value
//   response  status u8 | payload (the value, an i64, a u8, or an error text)
// The server bounds every length before it buffers anything, so a peer that lies about a length
// costs it nothing; the hello's secret is compared before any request is read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ferry::detail {

inline constexpr uint32_t kStoreMagic = 0x53564b46;  // "FKVS" little-endian
inline constexpr uint16_t kStoreVersion = 1;
inline constexpr size_t kStoreHelloBytes = 16;        // without the secret

enum class StoreOp : uint8_t { Hello = 0, Set = 1, Get = 2, Add = 3, Wait = 4, Check = 5,
                               Delete = 6, NumKeys = 7 };
enum class StoreStatus : uint8_t { Ok = 0, Timeout = 1, Error = 2 };

// The same limits on both sides: the client refuses bad input before sending it (naming the op),
// the server refuses a request that breaks them (a client of another version, or not ours).
inline constexpr size_t kStoreMaxKeyBytes = 4096;
inline constexpr size_t kStoreMaxValueBytes = size_t{16} << 20;
inline constexpr size_t kStoreMaxKeysPerCall = 1024;
inline constexpr size_t kStoreMaxBodyBytes =
    1 + 8 + 4 + kStoreMaxKeysPerCall * (4 + kStoreMaxKeyBytes) + 4 + kStoreMaxValueBytes;

struct StoreRequest {
  StoreOp op = StoreOp::Set;
  int64_t arg = 0;
  std::vector<std::string> keys;
  std::string value;
};

struct StoreResponse {
  StoreStatus status = StoreStatus::Ok;
  std::string payload;
};

std::string encode_store_hello(uint32_t rank, const std::string& secret);
// The fixed part of a hello: its rank and secret length, or nullopt with `error` set.
std::optional<uint32_t> decode_store_hello(const unsigned char* bytes, uint32_t& secret_bytes,
                                           std::string& error);

// With the u32 length in front.
std::string encode_store_request(const StoreRequest& r);
std::string encode_store_response(StoreStatus status, const std::string& payload);
// A request's body (without the length), or nullopt with `error` naming what is wrong.
std::optional<StoreRequest> decode_store_request(const std::string& body, std::string& error);

std::string encode_i64(int64_t v);
int64_t decode_i64(const unsigned char* p);
uint32_t decode_u32(const unsigned char* p);

// The op's name as the API spells it ("get", "add", ...).
const char* store_op_name(StoreOp op);

}  // namespace ferry::detail
