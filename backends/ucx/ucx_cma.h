// Large messages between ranks on one host, read straight from the sender's memory with
// process_vm_readv (cross-memory attach, CMA) instead of through UCX (internal).
//
// Why: ferry's endpoints use UCP_ERR_HANDLING_MODE_PEER, and UCX 1.13 then leaves its own CMA
// out, so large messages cross shared memory with two copies (into the FIFO and out of it).
// One read from the sender's buffer into the receiver's buffer is one copy.
//
// The protocol, per message of at least ucx_cma_min_bytes() to a rank on this host:
//  1. The sender sends a descriptor instead of the data, on the message's own tag with the
//     descriptor bit set (ucx_tag.h), so it matches the same receive, in the same order. The
//     descriptor says where the data is (address, bytes) and carries a cookie that names the
//     messages of this transfer. The send completes when the acknowledgement comes: until then
//     the peer may read the buffer.
//  2. The receive (posted as usual, on its own buffer) gets either the data (the sender did not
//     use CMA) or a descriptor (the tag says which). It validates the descriptor (magic,
//     version, its size equals the posted size), reads the bytes with process_vm_readv outside
//     UCX's callbacks and the worker's lock (UcxWorker::defer_locked: by whichever thread waits
//     on or tests the transport next), and answers with an acknowledgement on the cookie's tag.
//  3. The acknowledgement says Done, or Fallback (this rank may not read the sender's memory:
//     the sender then sends the data through UCX on the cookie's payload tag and stops using
//     CMA to that peer; a sender whose send was withdrawn meanwhile sends a zero-byte payload
//     instead, and the receive fails with PeerFailure naming it), or why the receive failed
//     (its size, withdrawn, the read failed), so the sender fails too instead of waiting.
// Both sides use one wire format on one host: native byte order, fixed sizes.
//
// Limits (also in docs/transports.md):
//  - A send withdrawn by cancel() (its deadline expired; the group is poisoned then) has sent
//    its descriptor already: a receiver that posts the matching receive late may still read the
//    buffer, as with UCX's own rendezvous protocol. Only the Fallback path knows better (the
//    withdrawn sender sends a zero-byte payload instead of the data).
//  - Version skew: a descriptor that does not decode (another magic or version) cannot be
//    answered, since its cookie cannot be trusted. The receive fails with TransportError; the
//    sender gets no acknowledgement and fails at its deadline (or when the receiving rank gives
//    up on the group). Every rank must run the same build.
#pragma once

#include <ferry/backends/byte_layout.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace ferry::detail {

struct CmaDescriptor {
  uint64_t cookie = 0;   // this transfer, unique per (sender, receiver); 1 .. kUcxMaxCmaCookie
  uint64_t address = 0;  // of the data, in the sender's address space
  uint64_t bytes = 0;
};
inline constexpr size_t kCmaDescriptorBytes = 32;

enum class CmaAckStatus : uint16_t {
  Done = 1,       // read; the sender's buffer is free
  Fallback = 2,   // may not read: send the data through UCX on the payload tag
  Mismatch = 3,   // the receive has another size (`value`: the receiver's bytes)
  Withdrawn = 4,  // the receiver withdrew its receive (cancel)
  ReadFailed = 5, // process_vm_readv failed (`value`: errno)
};
struct CmaAck {
  uint64_t cookie = 0;
  CmaAckStatus status = CmaAckStatus::Done;
  uint64_t value = 0;
};
inline constexpr size_t kCmaAckBytes = 24;

void encode_cma_descriptor(const CmaDescriptor& d, unsigned char (&out)[kCmaDescriptorBytes]);
// The descriptor in `data` (`bytes` long), or nullopt with `error` saying what is wrong with it.
// Checks the form only; the caller compares the size with its receive.
std::optional<CmaDescriptor> decode_cma_descriptor(const void* data, size_t bytes,
                                                   std::string& error);
void encode_cma_ack(const CmaAck& a, unsigned char (&out)[kCmaAckBytes]);
std::optional<CmaAck> decode_cma_ack(const void* data, size_t bytes, std::string& error);

// How a read of the peer's memory ended.
enum class CmaReadOutcome {
  Done,
  Refused,  // not allowed here (EPERM, EACCES, ENOSYS: ptrace policy, a container, seccomp)
  Gone,     // no such process (ESRCH): the peer ended
  Failed,   // anything else (EFAULT: the address range is not mapped in the peer); see `error`
};
struct CmaReadResult {
  CmaReadOutcome outcome = CmaReadOutcome::Done;
  int error = 0;  // errno
};
// Reads `bytes` at `remote` in process `pid` into `local`, retrying partial reads.
CmaReadResult cma_read(uint32_t pid, uint64_t remote, void* local, size_t bytes);
// The same into the pieces of `to` (to.bytes() bytes, in the layout's order): the kernel
// scatters them, so a laid-out receive needs no staging buffer and no unpack.
CmaReadResult cma_read_scattered(uint32_t pid, uint64_t remote, const ByteLayout& to);
// Whether a laid-out receive of `l` is worth reading scattered. The kernel pays about 25 ns
// per piece (one iovec each) here, an unpack about 14 us per 512 KiB (the figures are in
// docs/transports.md): scattering wins from pieces of about 1 KiB on average, and is chosen
// from 2 KiB.
bool cma_worth_scattering(const ByteLayout& l);
inline constexpr size_t kCmaScatterMinPiece = 2048;

// Which process a pid names. A pid and its start time name a process only within one pid
// namespace: ranks in containers that share a host name but not a pid namespace could find an
// unrelated process under a peer's pid. So each process keeps a random token in its memory and
// publishes its address and value (UcxPeerInfo, exchanged at bootstrap); a rank reads a peer's
// memory only after reading that token at that address in the peer's pid and finding the value.
inline constexpr size_t kCmaTokenBytes = 16;
struct CmaToken {
  uint64_t address = 0;  // in the owner's address space
  unsigned char value[kCmaTokenBytes] = {};
};
// This process's token (random, made once; lives until the process ends).
const CmaToken& cma_self_token();
// Whether process `pid` holds `token`; if not, `why` says what the read found.
bool cma_token_matches(uint32_t pid, const CmaToken& token, std::string& why);

// "0x1f00", for messages about addresses and magic numbers.
std::string hex(uint64_t v);

// Process-wide counts, for tests and FERRY_DEBUG (relaxed atomics).
struct CmaCounters {
  std::atomic<uint64_t> descriptors_sent{0};  // large sends offered by CMA
  std::atomic<uint64_t> reads{0};             // large receives read by CMA
  std::atomic<uint64_t> bytes_read{0};
  std::atomic<uint64_t> fallbacks{0};         // large receives whose read was refused
  std::atomic<uint64_t> scattered_reads{0};   // of `reads`: straight into a receive's layout
};
CmaCounters& cma_counters();

}  // namespace ferry::detail
