#include <ferry/backends/ucx/ucx_peer_blob.h>

#include <ferry/runtime/error.h>

#include <cstring>

namespace ferry::detail {
namespace {

constexpr size_t kFixedBytes = sizeof(uint32_t) + sizeof(uint64_t) + sizeof(uint64_t) +
                               kCmaTokenBytes + sizeof(uint32_t);

}  // namespace

std::string encode_ucx_peer_blob(const UcxPeerBlob& b) {
  const std::string host = b.host.substr(0, kMaxUcxHostBytes);
  std::string out(1, static_cast<char>(host.size()));
  out += host;
  out.append(reinterpret_cast<const char*>(&b.process.pid), sizeof b.process.pid);
  out.append(reinterpret_cast<const char*>(&b.process.start_time), sizeof b.process.start_time);
  out.append(reinterpret_cast<const char*>(&b.token.address), sizeof b.token.address);
  out.append(reinterpret_cast<const char*>(b.token.value), sizeof b.token.value);
  const auto length = static_cast<uint32_t>(b.address.size());
  out.append(reinterpret_cast<const char*>(&length), sizeof length);
  out += b.address;
  out += b.side_address;
  return out;
}

UcxPeerBlob decode_ucx_peer_blob(const std::string& blob, int rank, int from) {
  const size_t host = blob.empty() ? 0 : static_cast<unsigned char>(blob[0]);
  const size_t start = 1 + host + kFixedBytes;  // where the addresses begin
  const size_t addresses = blob.size() > start ? blob.size() - start : 0;
  uint32_t first = 0;  // the worker address's length, the last of the fixed fields
  if (addresses > 0) std::memcpy(&first, blob.data() + start - sizeof first, sizeof first);
  FERRY_CHECK(addresses >= 2 && addresses <= kMaxUcxAddressBytes && first >= 1 &&
                  first < addresses,
              TransportError, "ucx transport on rank ", rank, ": the address of rank ", from,
              " is malformed (", blob.size(), " bytes; expected a host name, a process id, a "
              "CMA token and two UCX worker addresses of at most ", kMaxUcxAddressBytes,
              " bytes together)");
  UcxPeerBlob p;
  p.host = blob.substr(1, host);
  const char* at = blob.data() + 1 + host;
  std::memcpy(&p.process.pid, at, sizeof p.process.pid);
  at += sizeof p.process.pid;
  std::memcpy(&p.process.start_time, at, sizeof p.process.start_time);
  at += sizeof p.process.start_time;
  std::memcpy(&p.token.address, at, sizeof p.token.address);
  at += sizeof p.token.address;
  std::memcpy(p.token.value, at, sizeof p.token.value);
  p.address = blob.substr(start, first);
  p.side_address = blob.substr(start + first);
  return p;
}

}  // namespace ferry::detail
