// How a ferry Tag and its source rank become one 64-bit UCP tag (internal).
//
// UCP matches a receive against messages from every endpoint of the worker, so the source
// rank must be part of the tag; receives then use the full mask, never wildcards.
//
//   bits 63..62  kind    0 collective step, 1 user send/recv, 2 diagnosis or handshake, 3 CMA
//   bits 61..48  source  world rank of the sender          (< 16384 ranks)
//   kinds 0-2:
//   bits 47..32  group   group id                          (< 65536 groups per process)
//   bit  31      the message is a CMA descriptor standing for the data (ucx_cma.h)
//   bits 30..0   kind 0: phase (1 bit) | step (14 bits) | (seq xor folded fingerprint hash) mod 2^16
//                kind 1: the user's tag (31 bits: user tags are non-negative ints)
//                kind 2: zero (kDiagnosisSeq, one exchange per group), or 1 + slot for the
//                        world handshakes of init and finalize and the host keys' exchange
//                        when a world group is made (kLifecycleSeq, group 0)
//   kind 3, the CMA protocol's own messages, named by the sender's cookie (unique per pair):
//   bit  47      0 acknowledgement (receiver to sender), 1 the data after a fallback
//   bits 46..0   cookie
//
// Receives of kinds 0-2 mask the descriptor bit out (kUcxRecvMask), so one receive takes the
// data or the descriptor for it, whichever the sender chose, in posting order; the sender's
// tag tells the receiver which one came. Every other bit must match.
//
// Why 16 bits of seq suffice: UCP matches messages of one sender with equal tags in the order
// they were sent, and every rank runs a group's collectives one after another, so a receive
// for op s can only be matched by a message of op s + 65536 if the message of op s never
// came, i.e. if op s failed on one side; the group is then poisoned and posts nothing more.
// The seq bits only keep a stale message of a withdrawn op from matching the next ops.
// Group ids cannot wrap that way: two live groups are independent streams, so an id that does
// not fit is refused (TransportError), never truncated. Step and phase limits are checked too:
// the algorithms use steps < group size and at most two phases.
#pragma once

#include <ferry/backends/transport.h>

#include <cstdint>

namespace ferry::detail {

inline constexpr int kUcxMaxRanks = 1 << 14;
inline constexpr uint32_t kUcxMaxGroups = 1u << 16;

// Throws TransportError when a field does not fit the layout above.
uint64_t pack_ucx_tag(int source, const Tag& tag);
inline constexpr uint64_t kUcxCmaDescriptorBit = uint64_t{1} << 31;
inline constexpr uint64_t kUcxRecvMask = ~kUcxCmaDescriptorBit;
inline constexpr uint64_t kUcxMaxCmaCookie = (uint64_t{1} << 47) - 1;
enum class CmaTagKind { Ack = 0, Payload = 1 };
// The tag of a CMA acknowledgement or fallback payload that `source` sends; `cookie` is the
// data sender's, 1 .. kUcxMaxCmaCookie.
uint64_t pack_ucx_cma_tag(int source, CmaTagKind kind, uint64_t cookie);

// The source world rank carried by a packed tag.
inline int ucx_tag_source(uint64_t tag) { return static_cast<int>((tag >> 48) & 0x3FFF); }

}  // namespace ferry::detail
