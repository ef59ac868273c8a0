#include <ferry/backends/ucx/ucx_tag.h>

#include <ferry/runtime/error.h>

namespace ferry::detail {
namespace {

constexpr uint64_t kKindCollective = 0, kKindP2P = 1, kKindDiagnosis = 2, kKindCma = 3;

}  // namespace

uint64_t pack_ucx_tag(int source, const Tag& tag) {
  FERRY_CHECK(source >= 0 && source < kUcxMaxRanks, TransportError, "ucx transport: world rank ",
              source, " does not fit the UCP tag (at most ", kUcxMaxRanks, " ranks)");
  FERRY_CHECK(tag.group < kUcxMaxGroups, TransportError, "ucx transport: group id ", tag.group,
              " does not fit the UCP tag (at most ", kUcxMaxGroups,
              " groups may be created per process)");
  uint64_t kind = kKindCollective, low = 0;
  if (tag.seq == kP2PSeq) {
    kind = kKindP2P;
    FERRY_CHECK(tag.slot < (1u << 31), TransportError, "ucx transport: user tag ", tag.slot,
                " does not fit the UCP tag (at most 2^31 - 1)");
    low = tag.slot;
  } else if (tag.seq == kDiagnosisSeq) {
    kind = kKindDiagnosis;
  } else if (tag.seq == kLifecycleSeq) {
    kind = kKindDiagnosis;  // shares the kind: one world handshake each, told apart by low bits
    FERRY_CHECK(tag.slot < 3, TransportError, "ucx transport: world handshake ", tag.slot,
                " does not exist (internal error)");
    low = 1 + tag.slot;
  } else {
    // OpContext puts the phase in the slot's top 8 bits and the step in the low 24.
    const uint32_t phase = tag.slot >> 24, step = tag.slot & 0xFFFFFF;
    FERRY_CHECK(phase < 2 && step < (1u << 14), TransportError, "ucx transport: ", tag_str(tag),
                " (phase ", phase, ") does not fit the UCP tag (phase < 2, step < 16384)");
    // The fingerprint hash is folded into the sequence bits: ranks that run different
    // collectives at one sequence number then post tags that do not match (and are diagnosed
    // at the deadline) instead of exchanging data. It weakens the stale-message argument above
    // only for groups that already failed.
    const uint64_t check = (tag.check ^ (tag.check >> 16)) & 0xFFFF;
    low = (uint64_t{phase} << 30) | (uint64_t{step} << 16) | ((tag.seq ^ check) & 0xFFFF);
  }
  return (kind << 62) | (uint64_t(source) << 48) | (uint64_t{tag.group} << 32) | low;
}

uint64_t pack_ucx_cma_tag(int source, CmaTagKind kind, uint64_t cookie) {
  FERRY_CHECK(source >= 0 && source < kUcxMaxRanks && cookie >= 1 && cookie <= kUcxMaxCmaCookie,
              TransportError, "ucx transport: CMA tag for rank ", source, ", cookie ", cookie,
              " out of range (internal error)");
  return (kKindCma << 62) | (uint64_t(source) << 48) |
         (uint64_t{kind == CmaTagKind::Payload} << 47) | cookie;
}

}  // namespace ferry::detail
