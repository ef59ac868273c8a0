// The one control message the UCX transport sends besides data: "rank R gave up on group G,
// because ...", as a UCP active message to every peer (internal).
//
// Its receiver validates it before use (magic, version, rank range, bounded reason length
// that must agree with the size UCX delivered); a malformed one is reported and ignored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace ferry::detail {

inline constexpr unsigned kUcxAbandonAmId = 17;
inline constexpr size_t kMaxAbandonReason = 1024;  // longer reasons are cut

struct AbandonMessage {
  int rank = 0;        // world rank that gave up
  uint32_t group = 0;  // on this group
  std::string why;
};

std::string encode_abandon(const AbandonMessage& m);
// The message, or nullopt with `error` saying what is wrong with it. `world_size` bounds ranks.
std::optional<AbandonMessage> decode_abandon(const void* data, size_t bytes, int world_size,
                                             std::string& error);

}  // namespace ferry::detail
