#include <ferry/backends/transport.h>

#include <ferry/runtime/error.h>

namespace ferry {

std::string tag_str(const Tag& tag) {
  if (tag.seq == kP2PSeq) return detail::str("group ", tag.group, " send/recv tag ", tag.slot);
  if (tag.seq == kDiagnosisSeq) return detail::str("group ", tag.group, " timeout diagnosis");
  if (tag.seq == kLifecycleSeq)
    return detail::str("the world handshake of ", tag.slot == 0 ? "init" : "finalize");
  return detail::str("group ", tag.group, " seq ", tag.seq, " step ", tag.slot);
}

void Transport::adopt_group_id(uint32_t id) {
  uint32_t next = next_group_id_.load();
  while (next <= id && !next_group_id_.compare_exchange_weak(next, id + 1)) {
  }
}

}  // namespace ferry
