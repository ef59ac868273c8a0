#include <ferry/backends/ucx/ucx_peer_blob.h>

#include <ferry/runtime/error.h>

#include <cstring>

namespace ferry::detail {
namespace {

constexpr size_t kFixedBytes = sizeof(uint32_t) + sizeof(uint64_t) + sizeof(uint64_t) +
                               kCmaTokenBytes;

}  // namespace

std::string encode_ucx_peer_blob(const UcxPeerBlob& b) {
  const std::string host = b.host.substr(0, kMaxUcxHostBytes);
  std::string out(1, static_cast<char>(host.size()));
  out += host;
  out.append(reinterpret_cast<const char*>(&b.process.pid), sizeof b.process.pid);
  out.append(reinterpret_cast<const char*>(&b.process.start_time), sizeof b.process.start_time);
  out.append(reinterpret_cast<const char*>(&b.token.address), sizeof b.token.address);
  out.append(reinterpret_cast<const char*>(b.token.value), sizeof b.token.value);
  out += b.address;
  return out;
}

UcxPeerBlob decode_ucx_peer_blob(const std::string& blob, int rank, int from) {
  const size_t host = blob.empty() ? 0 : static_cast<unsigned char>(blob[0]);
  FERRY_CHECK(!blob.empty() && blob.size() > 1 + host + kFixedBytes &&
                  blob.size() - 1 - host - kFixedBytes <= kMaxUcxAddressBytes,
              TransportError, "ucx transport on rank ", rank, ": the address of rank ", from,
              " is malformed (", blob.size(), " bytes; expected a host name, a process id, a "
              "CMA token and a UCX worker address of at most ", kMaxUcxAddressBytes, " bytes)");
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
  p.address = blob.substr(1 + host + kFixedBytes);
  return p;
}

}  // namespace ferry::detail
